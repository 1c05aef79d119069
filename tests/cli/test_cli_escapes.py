"""What the CLI prints from user input: a job name with a newline, NUL or terminal escape is
shown escaped (as ``repr`` writes it), so a table keeps one row per job and the terminal is
never driven by a name."""

from __future__ import annotations

import json

import yaml

from tests.helpers import FAKE_PRESET, make_preset_dir
from tuner import cli
from tuner.cli._common import printable
from tuner.job import create_job
from tuner.space import parse_space
from tuner.storage import Store


def test_printable_escapes_control_characters_only():
    assert printable("plain name-1.0 ü 中") == "plain name-1.0 ü 中"
    assert printable("a\nb\x00c") == "a\\nb\\x00c"
    assert printable("\x1b[31mred\t\r\u202eevil") == "\\x1b[31mred\\t\\r\\u202eevil"


def test_jobs_table_escapes_newlines_and_nul_in_names(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'j.db'}"
    d = make_preset_dir(tmp_path)
    data = yaml.safe_load(FAKE_PRESET)
    for name in ("a\nb\x00c", "\x1b[2Jwipe", "plain"):
        create_job(Store(url), parse_space({**data, "name": name}, base_dir=d))
    assert cli.main(["jobs", "--db", url]) == 0
    out = capsys.readouterr().out
    assert "\x00" not in out and "\x1b" not in out
    lines = out.splitlines()
    assert len(lines) == 2 + 3, out  # header, rule, one line per job
    assert "a\\nb\\x00c" in lines[2] and "\\x1b[2Jwipe" in lines[3] and "plain" in lines[4]
    # --json keeps the name exactly (JSON escapes it itself)
    assert cli.main(["jobs", "--db", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["name"] == "a\nb\x00c"
