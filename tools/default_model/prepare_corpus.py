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

Split: the trailing books (Colossians .. Revelation) are held out, contiguous, until at least 5% of
the bytes are held out; everything before is training text. Outputs (in --out):
train.txt, heldout.txt, source.json (package versions, .deb SHA-256, split, byte counts).

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
HELDOUT_FRACTION = 0.05

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


def books_from_verses(lines: list[str]) -> list[tuple[str, str]]:
    """(full book name, normalised book text) in canonical order."""
    names = dict(BOOKS)
    texts: dict[str, list[str]] = {}
    for line in lines:
        m = _VERSE_RE.match(line)
        if m is None:
            raise ValueError(f"unexpected line from bible: {line[:80]!r}")
        abbrev, chapter, verse, text = m.groups()
        texts.setdefault(abbrev, []).append(f"{chapter}:{verse} {' '.join(text.split())}")
    if list(texts) != [a for a, _ in BOOKS]:
        raise ValueError(f"book order differs from the canon: {list(texts)}")
    return [(names[a], f"{names[a]}\n" + "\n".join(v) + "\n\n") for a, v in texts.items()]


def split_books(books: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Hold out trailing books until >= HELDOUT_FRACTION of the bytes."""
    total = sum(len(t.encode()) for _, t in books)
    held = 0
    cut = len(books)
    while held < HELDOUT_FRACTION * total:
        cut -= 1
        held += len(books[cut][1].encode())
    return books[:cut], books[cut:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        packages = fetch_packages(Path(tmp))
        books = books_from_verses(dump_verses(Path(tmp) / "root"))
    train, heldout = split_books(books)
    for name, part in (("train.txt", train), ("heldout.txt", heldout)):
        (args.out / name).write_text("".join(t for _, t in part), encoding="utf-8")
    source = {
        "corpus": "King James Version of the Bible (1611), public domain",
        "debian_packages": packages,
        "license": "public domain (KJV text); the Debian packaging and `bible` program are GPL-2+ and not shipped",
        "normalisation": "one verse per line as 'chapter:verse text', whitespace collapsed, book name line first",
        "train_books": [n for n, _ in train],
        "heldout_books": [n for n, _ in heldout],
        "train_bytes": sum(len(t.encode()) for _, t in train),
        "heldout_bytes": sum(len(t.encode()) for _, t in heldout),
    }
    (args.out / "source.json").write_text(json.dumps(source, indent=2) + "\n")
    print(json.dumps({k: v for k, v in source.items() if k != "train_books"}, indent=2))


if __name__ == "__main__":
    main()
