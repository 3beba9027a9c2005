"""One table of options (lsp_server/options.py): the CLI, Settings, docs and the VS Code
extension's contribution agree with it, and command-line flags are not lost."""
import dataclasses
import json
from pathlib import Path

import pytest

from lsp_server.cli import main
from lsp_server.options import OPTIONS, SETTINGS, Settings, docs_table, merge

ROOT = Path(__file__).parent.parent
JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def test_settings_have_every_setting_with_the_table_default_and_type():
    assert {name: getattr(Settings(), name) for name in Settings.__dataclass_fields__} == {
        o.name: o.default for o in SETTINGS}
    types = {f.name: f.type for f in dataclasses.fields(Settings)}  # annotations, as written
    assert types == {o.name: o.kind.__name__ + (" | None" if o.nullable else "") for o in SETTINGS}


def test_the_readme_shows_the_table():
    assert docs_table() in (ROOT / "README.md").read_text()


def test_vscode_contribution_matches_the_table():
    properties = json.loads((ROOT / "editors" / "vscode" / "package.json").read_text())[
        "contributes"]["configuration"]["properties"]
    server_keys = {k.removeprefix("draftline.") for k in properties} - {"serverPath", "languages"}
    assert server_keys == {o.name for o in SETTINGS}
    for o in SETTINGS:
        entry = properties[f"draftline.{o.name}"]
        assert entry["default"] == o.default, o.name
        assert entry.get("enum") == (list(o.choices) if o.choices else None), o.name
        assert entry.get("minimum") == o.minimum and entry.get("maximum") == o.maximum, o.name
        assert entry["type"] == ([JSON_TYPES[o.kind], "null"] if o.nullable else JSON_TYPES[o.kind])


@pytest.mark.parametrize("option", SETTINGS, ids=lambda o: o.name)
def test_each_setting_takes_its_default_and_refuses_a_wrong_type(option):
    assert merge(Settings(), {option.name: option.default})[1] == []
    wrong = 3 if option.kind is str else "three"
    settings, problems = merge(Settings(), {option.name: wrong})
    assert len(problems) == 1 and getattr(settings, option.name) == option.default


def test_a_flag_before_the_command_is_kept(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--model", "/nonexistent/model.gguf", "complete", str(ROOT / "examples" / "shapes.py"),
              "--line", "3", "--col", "0"])
    assert "model not found: /nonexistent/model.gguf" in str(exit_.value.code)


def test_model_flags_are_accepted_before_bench():
    with pytest.raises(SystemExit) as exit_:
        main(["--threads", "2", "bench", "--tasks", "0"])
    assert "--tasks, --quality and --pauses must be at least 0, one of them positive" in str(exit_.value.code)


def test_every_flag_option_is_a_flag_of_complete(capsys):
    with pytest.raises(SystemExit):
        main(["complete", "--help"])
    help_text = capsys.readouterr().out
    assert all(o.cli_flag in help_text for o in OPTIONS if o.flag)
