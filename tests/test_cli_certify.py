"""``reasearch certify``: the certificate file round-trips; bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reasearch import cli
from reasearch.evaluators.certificate import Certificate
from reasearch.evaluators.circle_packing.task import SEED_SCORES, CirclePackingTask


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """Runs ``reasearch`` through ``cli.main`` (with only the certify command), returning (code, out, err)."""
    monkeypatch.setattr(cli, "_COMMAND_MODULES", ("reasearch._cli.certify",))
    monkeypatch.setenv("COLUMNS", "200")

    def _run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return _run


@pytest.fixture
def seed_file(tmp_path: Path) -> Path:
    path = tmp_path / "seed.py"
    path.write_text(CirclePackingTask(n=26).seed_program())
    return path


def test_certify_writes_a_certificate_that_round_trips(run, seed_file: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out_path = tmp_path / "cert.json"
    code, out, err = run("certify", "circle_packing/n26-v1", str(seed_file), "-o", str(out_path))
    assert code == 0, err
    assert "circle_packing/n26-v1: strict" in out and f"wrote the certificate to {out_path}" in out
    data = json.loads(out_path.read_text())
    assert data["format"] == "reasearch-certificate/1" and data["kind"] == "strict"
    assert data["score"]["float"] == SEED_SCORES[26]
    assert data["float_check"] == {"status": "OK", "score": SEED_SCORES[26]}
    p, q = (int(x) for x in data["score"]["exact"].split("/"))
    assert p / q == SEED_SCORES[26]
    cert = Certificate.from_json(out_path.read_text())
    assert json.loads(cert.to_json()) == data  # file -> Certificate -> JSON: nothing lost or changed
    assert cert.recheck().score == cert.score and cert.recheck().kind == "strict"
    code, _, err = run("certify", "circle_packing/n26-v1", str(seed_file), "-o", str(out_path))
    assert code == 2 and "exists; pass --force" in err  # never overwrites a certificate silently


def test_certify_a_tolerant_claim_exits_1_and_still_writes(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "near.py"  # 26 circles of radius 1/16 touching exactly on an 8x8 grid; circle 1 grows by 2**-30
    src.write_text("def run():\n"
                   "    centers = [((2 * (k % 8) + 1) / 16, (2 * (k // 8) + 1) / 16) for k in range(26)]\n"
                   "    radii = [1 / 16] * 26\n"
                   "    radii[1] += 2.0 ** -30\n"
                   "    return centers, radii\n")
    cert_path = tmp_path / "near.json"
    code, out, _ = run("certify", "circle_packing/n26-v1", str(src), "--json", "-o", str(cert_path))
    data = json.loads(out)
    assert code == 1 and data["kind"] == "tolerant" and data["float_check"]["status"] == "INVALID"
    assert json.loads(cert_path.read_text()) == data  # written even though the claim is not strict
    assert data["max_violation"]["exact"] == f"1/{2**30}" and data["max_violation"]["bound"] == "exact"
    code, out, _ = run("certify", "circle_packing/n26-v1", str(src), "--json", "--tolerance", "1e-10")
    assert code == 1 and json.loads(out)["kind"] == "invalid"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["heilbronn/n12-v1", "{tmp}/missing.py"], "no such candidate file"),
        (["circle_packin/n26-v1", "{seed}"], "circle_packin/n26-v1"),
        (["txn_scheduling/v1", "{seed}"], "txn_scheduling/v1 has no exact certification"),
        (["circle_packing/n26-v1", "{seed}", "--tolerance=-1e-6"], "--tolerance must be between 0 and 1"),
        (["circle_packing/n26-v1", "{seed}", "--tolerance", "nan"], "--tolerance must be a number"),
        (["circle_packing/n26-v1", "{seed}", "--tolerance", "1e400"], "--tolerance must be between 0 and 1"),
        (["circle_packing/n26-v1", "{seed}", "-o", "{tmp}/no/such/dir/c.json"], "no such folder"),
        (["circle_packing/n26-v1", "{tmp}"], "is a folder"),
    ],
)
def test_certify_bad_input_is_one_line_and_exit_2(run, seed_file: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                  argv: list[str], message: str) -> None:
    args = [a.format(tmp=tmp_path, seed=seed_file) for a in argv]
    code, out, err = run("certify", *args)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1 and err.startswith("reasearch: error: ")
