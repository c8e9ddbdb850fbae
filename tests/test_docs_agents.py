"""``docs/agents.md``'s snippet runs as written (offline: the scripted calculator world)."""

from __future__ import annotations

import re

from helpers import ROOT


def test_agents_doc_snippet_runs(tmp_path, monkeypatch, capsys):
    text = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks, "docs/agents.md has no python block"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    namespace: dict = {}
    exec(compile(blocks[0], "docs/agents.md", "exec"), namespace)
    assert capsys.readouterr().out.strip().endswith("[None, 0, 1, 2]")
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 1
    assert (tmp_path / "cliff-agent" / "cliff_rollouts.jsonl").is_file()
