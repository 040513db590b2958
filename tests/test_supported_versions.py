"""docs/integrations.md's supported-versions table against the committed locks: every row's package is pinned by
its environment's lock, inside the row's range; every lock the table names exists and the Makefile installs from
it. A lock bumped past a range (or a row whose range no lock satisfies) fails here until the table says so."""

import re
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "integrations.md"


def table() -> list[dict]:
    """The table's rows as dicts (integration, package, versions, lock)."""
    lines = [line for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[:4] == ["integration", "package", "versions", "environment (lock)"], header
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        locks = re.findall(r"\(`([^`]+)`\)", cells[3])
        assert len(locks) == 1, f"{cells[0]}: the environment column names one lock in (`...`): {cells[3]!r}"
        rows.append({"integration": cells[0], "package": cells[1].strip("`"), "versions": cells[2].strip("`"),
                     "lock": locks[0]})
    return rows


def pins(lock: str) -> dict[str, Version]:
    """``name -> version`` of every ``name==version`` line of a lock (local version labels kept)."""
    out = {}
    for line in (ROOT / lock).read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9._-]+)==([^\s;#]+)", line)
        if match:
            out[canonicalize_name(match.group(1))] = Version(match.group(2))
    return out


ROWS = table()


def test_the_table_names_every_integration_and_adapter():
    names = " ".join(r["integration"] for r in ROWS)
    for word in ("verl", "TRL bridge", "SkyRL", "vLLM", "OpenAI", "gymnasium", "skyrl-gym", "verifiers adapter, 0.3",
                 "verifiers adapter, 0.4", "TRL env adapter"):
        assert word in names, word
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for lock in {r["lock"] for r in ROWS}:
        assert (ROOT / lock).is_file() and lock in makefile, lock


@pytest.mark.parametrize("row", ROWS, ids=[r["integration"] for r in ROWS])
def test_each_lock_pins_its_package_inside_the_tables_range(row):
    pinned = pins(row["lock"]).get(canonicalize_name(row["package"]))
    assert pinned is not None, f"{row['lock']} does not pin {row['package']} ({row['integration']})"
    assert SpecifierSet(row["versions"]).contains(pinned, prereleases=True), (
        f"{row['lock']} pins {row['package']}=={pinned}, outside docs/integrations.md's range {row['versions']} for "
        f"{row['integration']}: test it, then widen the range")


def test_a_lock_outside_the_range_fails(tmp_path, monkeypatch):
    """The check itself: a lock pinning a version outside its row's range is caught."""
    row = next(r for r in ROWS if r["package"] == "skyrl")
    lock = tmp_path / "constraints-skyrl.txt"
    lock.write_text("skyrl==0.3.1\n", encoding="utf-8")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    with pytest.raises(AssertionError, match="outside docs/integrations.md's range"):
        test_each_lock_pins_its_package_inside_the_tables_range(row)
