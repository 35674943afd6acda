"""mkdocs hooks: the generated sections of the pages, and docstrings' reST roles as code.

* ``on_page_markdown``: every line ``<!-- generated: NAME -->`` becomes the Markdown of
  ``gen_reference.SECTIONS[NAME]`` (tables made from the code); an unknown name, or a table
  of the code that the descriptions do not match, stops the build.
* ``on_page_content``: the docstrings use reST roles (``:class:`Client```), which Markdown
  renders as ``:class:`` followed by code; they become plain code.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_reference  # noqa: E402

_MARKER = re.compile(r"^<!-- generated: ([a-z0-9-]+) -->$", re.MULTILINE)
_ROLE = re.compile(
    r":(?:py:)?(?:class|meth|func|attr|data|mod|exc|obj|const):<code>(~?)\.?([^<]*)</code>"
)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        section = gen_reference.SECTIONS.get(name)
        if section is None:
            raise PluginError(f"{page.file.src_path}: no generated section {name!r}")
        try:
            return section()
        except gen_reference.DocsDriftError as exc:
            raise PluginError(f"{page.file.src_path}: {exc}") from None

    return _MARKER.sub(fill, markdown)


def _code(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub(_code, html)
