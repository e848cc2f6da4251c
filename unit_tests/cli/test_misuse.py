"""Every misuse of the command line is one line that says the fix, before anything starts.

Each case runs ``main`` in this process with the stack's ports pointed at a closed port:
had a command tried to start or reach a stack, it would have taken seconds and said so.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from framework.cli import main


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLAMEPIPE_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "badsyntax.py").write_text("def broken(:\n")
    (tmp_path / "badimport.py").write_text("import nonexistent_module_xyz\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('no database here')\n")
    (tmp_path / "binary.toml").write_bytes(b"\x00\x01\xff")
    (tmp_path / "folder.toml").mkdir()
    (tmp_path / "stateless.py").write_text(
        "from connectors import KafkaSink, KafkaSource\nfrom framework import Pipeline\n"
        "p = Pipeline('s')\np.source(KafkaSource('in')).map(str).sink(KafkaSink('out'))\n"
    )
    (tmp_path / "windowed.py").write_text(
        "from framework.demos.wordcount import windowed_counts\n"
        "p = windowed_counts('w', 'in', 'out')\n"
    )
    (tmp_path / "five.toml").write_text("flamepipe = 5\n")
    (tmp_path / "typo.toml").write_text("[flamepipe]\nparalelism = 3\n")
    return tmp_path


DEPLOYED = "framework.demos.wordcount:deployed"
CASES = [
    (["run", "badsyntax:p"], "badsyntax.py, line 1: invalid syntax"),
    (["run", "badimport:p"], "cannot import 'badimport'"),
    (["run", "raises:p"], "raised RuntimeError: no database here"),
    (["run", "nocolon"], "write it as package.module:attribute"),
    (["run", "--config", "binary.toml", DEPLOYED], "is not UTF-8 text"),
    (["run", "--config", "folder.toml", DEPLOYED], "is a directory"),
    (["run", "--config", "five.toml", DEPLOYED], "must be a table"),
    (["run", "--config", "typo.toml", DEPLOYED], "did you mean 'parallelism'"),
    (["run", "--config", "missing.toml", DEPLOYED], "does not exist"),
    (["replay", DEPLOYED, "--offsets", "lines:0=²"], "write topic:partition=offset"),
    (["replay", DEPLOYED, "--offsets", "lines"], "write topic:partition=offset"),
    (["rescale", DEPLOYED, "--parallelism", "0"], "give a count of hash units >= 1"),
    (["rescale", "stateless:p", "--parallelism", "3"], "needs no rescale"),
    (["savepoint", "stateless:p"], "give --name NAME"),
    (["savepoint", "stateless:p", "--name", "a/b"], "letters, digits, '_' and '-' only"),
    (["savepoint", "stateless:p", "--delete", "v1"], "no savepoint 'v1'"),
    (["upgrade", "stateless:p", "--savepoint", "v1", "--rename", "x"], "write saved_id=new_id"),
]


@pytest.mark.parametrize(("argv", "says"), CASES)
def test_misuse_is_one_clear_line_before_anything_starts(
    cwd: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    started = time.monotonic()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flamepipe: error: "), err
    assert says in err[0]
    assert time.monotonic() - started < 5
    assert not (cwd / "state" / "kafka.pid").exists()


@pytest.mark.parametrize(
    "argv", [["demo", "--rate", "0"], ["demo", "--lines", "-3"], ["demo", "--parallelism", "0"]]
)
def test_bad_numbers_are_refused_by_the_parser(
    cwd: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "must be > 0" in capsys.readouterr().err
    assert not (cwd / "state" / "kafka.pid").exists()


def test_an_unknown_execution_mode_is_refused_by_the_parser(
    cwd: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--execution", "streaming"])
    assert exited.value.code == 2
    assert "choose from 'micro-batch', 'continuous'" in capsys.readouterr().err
    assert not (cwd / "state" / "kafka.pid").exists()
