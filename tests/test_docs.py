"""The documentation covers the code: every public name, config key, option and mcl2 command.

The generated parts of the site come from ``docs/gen_reference.py``; these tests call it the
way the build does (without mkdocs), and read the hand-written pages, so that a name added to
the code without its page fails here, with the name.  ``scripts/test.sh`` also builds the
whole site with ``mkdocs build --strict``.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest

import mooncake_cffi
from mooncake_cffi import Client, config

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
sys.path.insert(0, str(DOCS))

import gen_reference  # noqa: E402

MARKER = re.compile(r"^<!-- generated: ([a-z0-9-]+) -->$", re.MULTILINE)


def page(path: str) -> str:
    return (DOCS / path).read_text()


def rendered(path: str) -> str:
    """A page with its generated sections filled in, as the build does."""
    return MARKER.sub(lambda m: gen_reference.SECTIONS[m.group(1)](), page(path))


def test_every_public_name_is_in_the_api_pages() -> None:
    api = "\n".join(p.read_text() for p in sorted((DOCS / "api").glob("*.md")))
    documented = set(re.findall(r"^::: mooncake_cffi(?:\.\w+)*\.(\w+)$", api, re.MULTILINE))
    mentioned = set(re.findall(r"`(?:mooncake_cffi\.)?(\w+)`", api))
    missing = [n for n in mooncake_cffi.__all__ if n not in documented | mentioned]
    assert not missing, f"public names missing from docs/api/: {missing}"


def test_the_api_pages_render_the_classes_and_functions_by_directive() -> None:
    api = "\n".join(p.read_text() for p in sorted((DOCS / "api").glob("*.md")))
    documented = set(re.findall(r"^::: mooncake_cffi(?:\.\w+)*\.(\w+)$", api, re.MULTILINE))
    callables = [
        n
        for n in mooncake_cffi.__all__
        if inspect.isclass(getattr(mooncake_cffi, n))
        or inspect.isfunction(getattr(mooncake_cffi, n))
    ]
    missing = [n for n in callables if n not in documented]
    assert not missing, f"no '::: ...' directive in docs/api/ for: {missing}"


def test_every_config_key_is_in_the_configuration_reference() -> None:
    text = rendered("reference/configuration.md")
    keys = config.MOONCAKE_KEYS | config.LMCACHE_ONLY_KEYS | config.CLIENT_KEYS
    missing = sorted(k for k in keys | config.KEY_ALIASES.keys() if f"| `{k}` |" not in text)
    assert not missing, f"config keys missing from the configuration reference: {missing}"


def test_every_client_option_is_in_the_configuration_reference() -> None:
    text = rendered("reference/configuration.md")
    params = [p for p in inspect.signature(Client.__init__).parameters if p != "self"]
    missing = [p for p in params if f"| `{p}`" not in text]
    assert not missing, f"Client options missing from the configuration reference: {missing}"


def test_a_config_key_without_a_description_stops_the_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(config, "CLIENT_KEYS", config.CLIENT_KEYS | {"brand_new_key"})
    with pytest.raises(gen_reference.DocsDriftError, match="brand_new_key"):
        gen_reference.client_keys()


def test_a_description_of_a_key_no_longer_in_the_code_stops_the_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(config, "MOONCAKE_KEYS", config.MOONCAKE_KEYS - {"tenant_id"})
    with pytest.raises(gen_reference.DocsDriftError, match="tenant_id"):
        gen_reference.mooncake_keys()


def test_every_mcl2_command_is_in_the_cli_reference() -> None:
    text = rendered("reference/mcl2.md")
    paths = gen_reference.mcl2_command_paths()
    assert "mcl2 cluster up" in paths and "mcl2 completion" in paths
    missing = [p for p in paths if f"## `{p}`" not in text]
    assert not missing, f"mcl2 commands missing from docs/reference/mcl2.md: {missing}"
    for path in paths[1:]:
        assert f"[`{path}`]" in text, f"{path} is not in the command table"


def test_every_mcl2_command_shows_its_own_help_text() -> None:
    from mooncake_cffi.cli.main import cli

    text = " ".join(rendered("reference/mcl2.md").split())
    for name, command in cli.commands.items():
        first = " ".join((command.help or "").strip().split("\n\n")[0].split())
        assert first in text, f"mcl2 {name}'s help text is not in the reference"


def test_every_metric_series_is_in_the_metrics_reference() -> None:
    from mooncake_cffi import metrics

    text = rendered("reference/metrics.md")
    for fam in metrics.ClientCollector().describe():
        name = fam.name + ("_total" if fam.type == "counter" else "")
        assert f"`{name}`" in text, f"{name} is not in docs/reference/metrics.md"


def test_every_status_code_is_in_the_status_code_reference() -> None:
    from mooncake_cffi import status

    text = rendered("reference/status-codes.md")
    missing = [name for code, name, _ in status.CODES if code and f"`{name}`" not in text]
    assert not missing, f"status codes missing: {missing}"


def test_every_generated_section_named_by_a_page_exists() -> None:
    for path in DOCS.rglob("*.md"):
        for name in MARKER.findall(path.read_text()):
            assert name in gen_reference.SECTIONS, f"{path}: no generated section {name!r}"


def test_every_page_is_in_the_navigation() -> None:
    nav = set(re.findall(r":\s+(\S+\.md)\s*$", (REPO / "mkdocs.yml").read_text(), re.MULTILINE))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages == nav, f"not in mkdocs.yml's nav: {pages - nav}; missing: {nav - pages}"


def test_the_readme_links_only_to_pages_that_exist() -> None:
    readme = (REPO / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links, "the README links into the documentation"
    missing = [link for link in links if not (REPO / link).exists()]
    assert not missing, f"README links to missing pages: {missing}"


def test_the_readme_stays_short() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 210, f"README.md has {len(lines)} lines; the details belong in docs/"


def test_the_tested_releases_tables_list_every_tested_lmcache() -> None:
    from mooncake_cffi.lmcache.compat import TESTED_LMCACHE_VERSIONS

    readme = (REPO / "README.md").read_text()
    releases = page("reference/releases.md")
    extra = re.search(
        r'^lmcache = \["lmcache>=([^,"]+),<([^"]+)"\]',
        (REPO / "pyproject.toml").read_text(),
        re.MULTILINE,
    )
    assert extra, "pyproject.toml has the lmcache extra"
    assert extra.group(1) == TESTED_LMCACHE_VERSIONS[0], "the extra starts at the oldest tested"
    for text, where in ((readme, "README.md"), (releases, "reference/releases.md")):
        row = next(line for line in text.splitlines() if line.startswith("| LMCache |"))
        missing = [v for v in TESTED_LMCACHE_VERSIONS if v not in row]
        assert not missing, f"{where}'s LMCache row lacks {missing}"
        assert f">={extra.group(1)},<{extra.group(2)}" in row, f"{where} names the extra's range"
