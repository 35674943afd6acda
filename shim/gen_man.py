"""Writes man/mcs.3 from shim/mcs.h, so the header is the one place each call's contract is
written: the header's opening comment becomes DESCRIPTION, its types (with their comments)
TYPES, and each ``/* --- section --- */`` of functions a subsection of FUNCTIONS, every
prototype followed by the comment above it.

    python shim/gen_man.py [shim/mcs.h [man/mcs.3]]      # write the page
    python shim/gen_man.py --check                       # exit 1 if the page is stale

tests/test_capi.py runs the check, so a header change without the page fails CI.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "shim" / "mcs.h"
PAGE = ROOT / "man" / "mcs.3"


def _roff(text: str) -> str:
    """Plain text made safe for roff: backslashes escaped, no line starting a request."""
    lines = []
    for line in text.replace("\\", "\\e").split("\n"):
        lines.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(lines)


def _uncomment(comment: str) -> str:
    """The text of a ``/* ... */`` comment, its leading `` * `` stripped."""
    body = comment.strip()[2:-2]
    lines = [re.sub(r"^\s*\* ?", "", line) for line in body.split("\n")]
    return "\n".join(lines).strip()


def _paragraphs(text: str) -> str:
    """Comment text as roff: blank lines split paragraphs, `` - `` items become bullets,
    indented lines stay as they are."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        if not para.strip():
            continue
        items = re.split(r"\n(?= ?- )", para)
        if len(items) > 1 and not items[0].lstrip().startswith("- "):
            out.append(".SS " + _roff(items.pop(0).strip()))  # a heading over its items
        if len(items) > 1 or para.lstrip().startswith("- "):
            for item in items:
                item = re.sub(r"^\s*- ", "", item)
                out.append(".IP \\(bu 2\n" + _roff(re.sub(r"\s*\n\s*", " ", item.strip())))
            continue
        if any(line.startswith("  ") for line in para.split("\n")[1:]):
            out.append(".PP\n.nf\n" + _roff(para) + "\n.fi")
        else:
            out.append(".PP\n" + _roff(re.sub(r"\s*\n\s*", " ", para.strip())))
    return "\n".join(out)


def _prototype(decl: str) -> str:
    return re.sub(r"\s+", " ", decl.replace("MCS_API ", "")).replace("( ", "(").strip()


def render(header: str) -> str:
    opening = re.match(r"\s*(/\*.*?\*/)", header, re.S)
    assert opening, "mcs.h starts with its conventions comment"
    intro = _uncomment(opening.group(1))
    title, _, description = intro.partition("\n")
    version = ".".join(
        re.search(rf"#define MCS_VERSION_{part} (\d+)", header).group(1)  # type: ignore[union-attr]
        for part in ("MAJOR", "MINOR", "PATCH")
    )
    abi = re.search(r"#define MCS_ABI_VERSION (\d+)", header)
    cdef = header[header.index("MCS_CDEF_BEGIN") : header.index("MCS_CDEF_END")]
    cdef = cdef[cdef.index("*/") + 2 :]
    first_fn = cdef.index("/* --- ")
    types, functions = cdef[:first_fn], cdef[first_fn:]

    prototypes: list[str] = []
    sections = re.split(r"/\* --- (.*?) --- \*/", functions)[1:]
    body: list[str] = []
    for name, block in zip(sections[0::2], sections[1::2]):
        body.append(f".SS {_roff(name[0].upper() + name[1:])}")
        for m in re.finditer(r"((?:/\*.*?\*/\s*)*)(MCS_API[^;]*;)", block, re.S):
            proto = _prototype(m.group(2))
            prototypes.append(proto)
            text = " ".join(_uncomment(c) for c in re.findall(r"/\*.*?\*/", m.group(1), re.S))
            body.append(".TP\n.B " + _roff(proto) + "\n" + _roff(re.sub(r"\s*\n\s*", " ", text)))

    type_blocks: list[str] = []
    for m in re.finditer(
        r"((?:/\*.*?\*/\s*)*)((?:struct|enum|typedef)[^{;]*(?:\{.*?\})?[^;]*;)", types, re.S
    ):
        comments = [_uncomment(c) for c in re.findall(r"/\*.*?\*/", m.group(1), re.S)]
        # A comment standing alone above another one is a note on the type before it.
        for note in comments[:-1]:
            type_blocks.append(".PP\n" + _roff(re.sub(r"\s*\n\s*", " ", note)))
        comment = comments[-1] if comments else ""
        decl = m.group(2).strip()
        head = re.match(r"(?:typedef\s+)?(struct|enum)\s+(\w+)", decl)
        name = f"{head.group(1)} {head.group(2)}" if head else decl.split()[0]
        type_blocks.append(
            f".SS {name}\n"
            + (_roff(re.sub(r"\s*\n\s*", " ", comment)) + "\n" if comment else "")
            + ".PP\n.nf\n"
            + _roff(decl)
            + "\n.fi"
        )

    return "\n".join(
        [
            '.\\" Generated from shim/mcs.h by shim/gen_man.py: edit the header, not this page.',
            f'.TH MCS 3 "" "mooncake-cffi {version}" "mooncake-cffi"',
            ".SH NAME",
            "mcs \\- " + _roff(title.split(" - ", 1)[-1]),
            ".SH SYNOPSIS",
            ".nf",
            ".B #include <mcs.h>",
            "",
            *(_roff(p) for p in prototypes),
            ".fi",
            ".PP",
            "Link with the",
            ".B libmcs.so",
            "installed inside the Python package",
            ".B mooncake_cffi",
            f"(ABI version {abi.group(1)})." if abi else ".",
            ".SH DESCRIPTION",
            _paragraphs(description),
            ".SH TYPES",
            *type_blocks,
            ".SH FUNCTIONS",
            *body,
            ".SH SEE ALSO",
            ".BR mcl2 (1);",
            "the header itself,",
            ".IR mcs.h ,",
            "installed beside the library.",
            "",
        ]
    )


def main(argv: list[str]) -> int:
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    header = Path(args[0]) if args else HEADER
    page = Path(args[1]) if len(args) > 1 else PAGE
    text = render(header.read_text())
    if check:
        if page.read_text() != text:
            print(f"{page} is stale: run python shim/gen_man.py", file=sys.stderr)
            return 1
        return 0
    page.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
