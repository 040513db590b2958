"""The array-API example of docs/credit_formats.md runs and prints what the doc says."""

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "credit_formats.md"


def test_array_api_example_runs_as_documented():
    section = DOC.read_text(encoding="utf-8").split("## Array API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 12
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {})
    printed = re.search(r"print\(adv\.round\(3\)\)\s+# (\[[^\]]*\])", code).group(1)
    assert out.getvalue().strip() == printed
