"""Build the default model's corpus: the King James Bible from Debian's bible-kjv packages.

Source: Debian `bible-kjv-text` (the compressed text, `/usr/lib/bible.data`) read with the
`bible` program of Debian `bible-kjv` (both version 4.38, main section). The KJV text (1611) is in
the public domain (the package's copyright file: "The copyright for the King James Version text
of the Bible is expired"); the packaging/program is GPL-2+, and we ship none of it.

Normalised form, one book per block:
    <Book name>            (full English name, e.g. "Genesis", "1 Corinthians")
    1:1 In the beginning God created the heaven and the earth.
    ...
followed by a blank line. Whitespace inside a verse is collapsed to single spaces; nothing else
is changed (spelling, punctuation and italics-free text are the package's).

Split: every 20th chapter of the canon (chapters 20, 40, 60, ... counted across all books, about
5% of the bytes) is held out; everything else is training text. Held-out chapters are spread over
the whole Bible, so the held-out text has the training text's mix of narrative, law, poetry,
prophecy, gospels and epistles. (An earlier split held out the trailing epistles as one block; the
model then met a style in evaluation it had hardly seen in training, and its greedy continuations
of epistle verses looped.) Each block of consecutive chapters starts with its book's name line
and ends with a blank line, in both files. Outputs (in --out): train.txt, heldout.txt,
source.json (package versions, .deb SHA-256, split, byte counts).

    python tools/default_model/prepare_corpus.py --out .dm_data
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import tempfile
from pathlib import Path

PACKAGES = ("bible-kjv-text", "bible-kjv")
HELDOUT_EVERY = 20  # hold out chapters HELDOUT_EVERY, 2*HELDOUT_EVERY, ... of the canon

# The `bible` program's book abbreviations, in canonical order, and their full names.
BOOKS = [
    ("Ge", "Genesis"), ("Exo", "Exodus"), ("Lev", "Leviticus"), ("Num", "Numbers"),
    ("Deu", "Deuteronomy"), ("Josh", "Joshua"), ("Jdgs", "Judges"), ("Ruth", "Ruth"),
    ("1Sm", "1 Samuel"), ("2Sm", "2 Samuel"), ("1Ki", "1 Kings"), ("2Ki", "2 Kings"),
    ("1Chr", "1 Chronicles"), ("2Chr", "2 Chronicles"), ("Ezra", "Ezra"), ("Neh", "Nehemiah"),
    ("Est", "Esther"), ("Job", "Job"), ("Psa", "Psalms"), ("Prv", "Proverbs"),
    ("Eccl", "Ecclesiastes"), ("SSol", "Song of Solomon"), ("Isa", "Isaiah"), ("Jer", "Jeremiah"),
    ("Lam", "Lamentations"), ("Eze", "Ezekiel"), ("Dan", "Daniel"), ("Hos", "Hosea"),
    ("Joel", "Joel"), ("Amos", "Amos"), ("Obad", "Obadiah"), ("Jonah", "Jonah"), ("Mic", "Micah"),
    ("Nahum", "Nahum"), ("Hab", "Habakkuk"), ("Zep", "Zephaniah"), ("Hag", "Haggai"),
    ("Zec", "Zechariah"), ("Mal", "Malachi"), ("Mat", "Matthew"), ("Mark", "Mark"), ("Luke", "Luke"),
    ("John", "John"), ("Acts", "Acts"), ("Rom", "Romans"), ("1Cor", "1 Corinthians"),
    ("2Cor", "2 Corinthians"), ("Gal", "Galatians"), ("Eph", "Ephesians"), ("Phi", "Philippians"),
    ("Col", "Colossians"), ("1Th", "1 Thessalonians"), ("2Th", "2 Thessalonians"),
    ("1Tim", "1 Timothy"), ("2Tim", "2 Timothy"), ("Titus", "Titus"), ("Phmn", "Philemon"),
    ("Heb", "Hebrews"), ("Jas", "James"), ("1Pet", "1 Peter"), ("2Pet", "2 Peter"), ("1Jn", "1 John"),
    ("2Jn", "2 John"), ("3Jn", "3 John"), ("Jude", "Jude"), ("Rev", "Revelation"),
]
_VERSE_RE = re.compile(r"^(\w+?)(\d+):(\d+) (.*)$")


def fetch_packages(workdir: Path) -> dict[str, dict[str, str]]:
    """`apt-get download` both packages into workdir and unpack them; returns name -> {version, sha256}."""
    info: dict[str, dict[str, str]] = {}
    for pkg in PACKAGES:
        subprocess.run(["apt-get", "download", "-q", pkg], cwd=workdir, check=True, capture_output=True)
        deb = next(workdir.glob(f"{pkg}_*.deb"))
        subprocess.run(["dpkg", "-x", str(deb), str(workdir / "root")], check=True)
        info[pkg] = {"file": deb.name, "version": deb.name.split("_")[1],
                     "sha256": hashlib.sha256(deb.read_bytes()).hexdigest()}
    return info


def dump_verses(root: Path) -> list[str]:
    """Every verse, one per line, `Ge1:1 text`, by the package's own reader (-f: no pretty-print)."""
    out = subprocess.run([str(root / "usr/bin/bible"), "-f", "-p", str(root / "usr/lib"), "gen1:1-rev22:21"],
                         check=True, capture_output=True, text=True).stdout
    return out.splitlines()


Chapter = tuple[str, int, list[str]]  # (full book name, chapter number, verse lines)


def chapters_from_verses(lines: list[str]) -> list[Chapter]:
    """Every chapter, in canonical order, with its normalised verse lines `chapter:verse text`."""
    names = dict(BOOKS)
    chapters: list[Chapter] = []
    seen_books: list[str] = []
    for line in lines:
        m = _VERSE_RE.match(line)
        if m is None:
            raise ValueError(f"unexpected line from bible: {line[:80]!r}")
        abbrev, chapter, verse, text = m.groups()
        if not seen_books or seen_books[-1] != abbrev:
            seen_books.append(abbrev)
        if not chapters or chapters[-1][0] != names[abbrev] or chapters[-1][1] != int(chapter):
            chapters.append((names[abbrev], int(chapter), []))
        chapters[-1][2].append(f"{chapter}:{verse} {' '.join(text.split())}")
    if seen_books != [a for a, _ in BOOKS]:
        raise ValueError(f"book order differs from the canon: {seen_books}")
    return chapters


def blocks(chapters: list[Chapter]) -> str:
    """Runs of consecutive chapters of one book, each run as `Book name`, its verses, a blank line."""
    out: list[str] = []
    previous: tuple[str, int] | None = None
    for book, number, verses in chapters:
        if previous != (book, number - 1):
            if out:
                out.append("\n")
            out.append(f"{book}\n")
        out.append("\n".join(verses) + "\n")
        previous = (book, number)
    return "".join(out) + "\n"


def split_chapters(chapters: list[Chapter]) -> tuple[list[Chapter], list[Chapter]]:
    """(training chapters, held-out chapters): every HELDOUT_EVERY-th chapter is held out."""
    held = [c for i, c in enumerate(chapters, start=1) if i % HELDOUT_EVERY == 0]
    train = [c for i, c in enumerate(chapters, start=1) if i % HELDOUT_EVERY != 0]
    return train, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        packages = fetch_packages(Path(tmp))
        chapters = chapters_from_verses(dump_verses(Path(tmp) / "root"))
    train, heldout = split_chapters(chapters)
    texts = {"train.txt": blocks(train), "heldout.txt": blocks(heldout)}
    for name, text in texts.items():
        (args.out / name).write_text(text, encoding="utf-8")
    source = {
        "corpus": "King James Version of the Bible (1611), public domain",
        "debian_packages": packages,
        "license": "public domain (KJV text); the Debian packaging and `bible` program are GPL-2+ and not shipped",
        "normalisation": "one verse per line as 'chapter:verse text', whitespace collapsed, book name line first",
        "split": f"every {HELDOUT_EVERY}th chapter of the canon held out",
        "heldout_chapters": [f"{book} {number}" for book, number, _ in heldout],
        "train_chapters": len(train),
        "train_bytes": len(texts["train.txt"].encode()),
        "heldout_bytes": len(texts["heldout.txt"].encode()),
    }
    (args.out / "source.json").write_text(json.dumps(source, indent=2) + "\n")
    print(json.dumps({k: v for k, v in source.items() if k != "heldout_chapters"}, indent=2))


if __name__ == "__main__":
    main()
