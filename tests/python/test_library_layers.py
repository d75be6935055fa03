"""docs/ARCHITECTURE.md's layer rule: the library (src/measure, ot, attention, fast_gauss, dynamics,
gaussian) takes typed structs and returns typed results; it includes no TOML, JSON, config or
summary header (the summaries in src/io format its results)."""
import re

from conftest import ROOT

LIBRARY = ("measure", "ot", "attention", "fast_gauss", "dynamics", "gaussian")
# toml++, nlohmann/json, src/io's JSON helpers and summary documents, the config and summary headers.
FORBIDDEN = re.compile(r'#\s*include\s*[<"][^>"]*(toml|nlohmann|json|config|summar)[^>"]*[>"]')


def test_the_library_includes_no_config_or_summary_header():
    files = [p for folder in LIBRARY for p in sorted((ROOT / "src" / folder).rglob("*")) if p.suffix in (".cpp", ".hpp")]
    assert len(files) > 20  # the folders were found
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files for m in FORBIDDEN.finditer(p.read_text())]
    assert found == [], "the library must not format or read configs:\n" + "\n".join(found)


def test_the_rule_sees_an_include_it_forbids():
    assert FORBIDDEN.search('#include <nlohmann/json.hpp>') and FORBIDDEN.search('#include "../io/summary_documents.hpp"')
    assert FORBIDDEN.search('#include "tokenflow/config.hpp"') and not FORBIDDEN.search('#include "tokenflow/ot.hpp"')
