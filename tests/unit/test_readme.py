"""The README's quickstart runs as written, so it cannot rot."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_quickstart_runs(tmp_path, monkeypatch, capsys):
    text = README.read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md quickstart", "exec"), {})
    assert capsys.readouterr().out.strip() == "(32, 8) (32,)"
