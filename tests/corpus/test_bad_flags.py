"""Every case of tests/corpus/bad_flags.py, through ``recon.cli.main`` in-process: the stated exit status,
exactly one line on stderr matching the case's message, no traceback, and the case's checks afterwards."""

from __future__ import annotations

import re

import pytest

from recon.cli import main

from tests.corpus.bad_flags import CASES, BadFlagCase


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_flag_gives_one_line(case: BadFlagCase, tmp_path, monkeypatch, capsys):
    argv = [str(a) for a in case.argv(tmp_path)]
    capsys.readouterr()  # output of the set-up (a tiny training) is not the command's
    if case.patch is not None:
        case.patch(monkeypatch)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    monkeypatch.undo()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    assert re.search(case.message, lines[0]), lines[0]
    assert exc.value.code == case.status, (exc.value.code, lines[0])
    if case.after is not None:
        case.after(tmp_path)


def test_case_names_are_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
