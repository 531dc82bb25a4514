"""Winners of several triton versions (issue 33): one of another version serves for the same kernels,
after the running version's; config files keep the versions of a problem apart through export and
import; host names are written only when asked; a tuning run under a new triton adds its own rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.db import BIG, ENV, ENV_NEW_KERNELS, ENV_OLD_TRITON, SK, SMALL, key, measurement, winner
from sqlalchemy import text

from tritonblas.arch import device_for_arch
from tritonblas.config import GemmConfig
from tritonblas.problem import Problem
from tuning_db import EnvIdentity, TuningDB, TuningDBError, Winner
from tuning_db import exchange as ex
from tuning_db.coverage import coverage_gaps, other_triton_counts
from tuning_db.engine import make_engine

ENV_39 = ENV.model_copy(update={"triton_version": "3.9.0"})
VENDOR = GemmConfig.vendor()


def read_as(running: EnvIdentity, w: Winner) -> Winner:
    """`w` with its stale/other_triton state as `running` code reads it."""
    return w.model_copy(update=Winner.state_for(w.env, running))


def two_versions(db: TuningDB) -> None:
    """m=16 tuned under 3.6.0 (SMALL, faster) and 3.9.0 (BIG); m=32 and m=48 under 3.6.0 only; m=64 a
    torch.mm winner under both, each with the fastest kernel of its own run."""
    db.import_winners([winner(key(m=16), ms=0.5, env=ENV), winner(key(m=16), ms=0.7, config=BIG, env=ENV_39),
                       winner(key(m=32), ms=0.4, env=ENV), winner(key(m=48), ms=0.4, env=ENV),
                       winner(key(m=64), ms=0.3, config=VENDOR, env=ENV),
                       winner(key(m=64), ms=0.3, config=VENDOR, env=ENV_39)])
    db.record_measurements(key(m=64), ENV, [measurement(SMALL, 0.6), measurement(VENDOR, 0.3)])
    db.record_measurements(key(m=64), ENV_39, [measurement(SK, 0.5), measurement(VENDOR, 0.3)])


def test_a_file_keeps_the_triton_versions_of_a_problem_apart_and_round_trips(db, tmp_path):
    two_versions(db)
    ex.export_file(db, tmp_path / "a.json", "sm_90", env=ENV_39)
    data = json.loads((tmp_path / "a.json").read_text())
    # Format 2; the header names the version most entries were tuned under, the others name theirs.
    assert (data["header"]["schema_version"], data["header"]["triton_version"]) == (2, "3.6.0")
    assert [(e["m"], e.get("triton_version")) for e in data["entries"]] == [
        (16, None), (16, "3.9.0"), (32, None), (48, None), (64, None), (64, "3.9.0")]
    assert [e["kernel"]["config"] for e in data["entries"] if e["m"] == 64] == [
        SMALL.model_dump(mode="json"), SK.model_dump(mode="json")]
    with TuningDB(str(tmp_path / "other.sqlite")) as other:
        report = ex.import_file(other, tmp_path / "a.json", env=ENV_39)
        assert (report.written, report.stale, report.other_triton) == (6, False, {"3.6.0": 4})
        assert [(w.key.m, w.env.triton_version) for w in other.winners(env=ENV_39)] == [
            (16, "3.6.0"), (16, "3.9.0"), (32, "3.6.0"), (48, "3.6.0"), (64, "3.6.0"), (64, "3.9.0")]
        assert [m.config for m in other.measurements(key(m=64), ENV_39)] == [SK]  # each run its own
        ex.export_file(other, tmp_path / "b.json", "sm_90", env=ENV)  # exported under the other version
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


@pytest.mark.parametrize("running, expected", [
    (ENV_39, {16: (BIG, False), 32: (SMALL, True), 64: (VENDOR, False)}),  # its own version first
    (ENV, {16: (SMALL, False), 32: (SMALL, False), 64: (VENDOR, False)}),
    (ENV_OLD_TRITON, {16: (SMALL, True), 32: (SMALL, True), 64: (VENDOR, True)}),  # neither: the fastest
])
def test_the_file_serves_the_running_versions_entry_first(db, tmp_path, running, expected):
    two_versions(db)
    cfg = ex.export_file(db, tmp_path / "a.json", "sm_90", env=ENV)
    serving = cfg.serving(running)
    got = {m: (serving[key(m=m).shape_key()][0].config, serving[key(m=m).shape_key()][0].other_triton)
           for m in expected}
    assert got == expected
    kernel = serving[key(m=64).shape_key()][1].config  # the kernel fallback of the entry that serves
    assert kernel == (SK if serving[key(m=64).shape_key()][0].env.triton_version == "3.9.0" else SMALL)
    assert cfg.lookup(key(m=16, device_name="NVIDIA H100"), running) == expected[16][0]
    assert cfg.serving(running.model_copy(update={"kernel_hash": "k9"})) == {}  # other kernels: stale


def test_a_single_version_file_stays_format_1(db, tmp_path):
    db.import_winners([winner(key(m=16), env=ENV_OLD_TRITON), winner(key(m=32), env=ENV_OLD_TRITON)])
    cfg = ex.export_file(db, tmp_path / "a.json", "sm_90", env=ENV)  # tuned under 3.5.0, running 3.6.0
    assert (cfg.header.schema_version, cfg.header.triton_version) == (1, "3.5.0")
    assert all(e.triton_version is None for e in cfg.entries)


@pytest.mark.parametrize("with_host", [False, True])
def test_export_writes_host_names_only_when_asked(db, tmp_path, with_host):
    db.import_winners([winner(key(m=16), host="tuner-7"), winner(key(m=32), host="")])
    cfg = ex.export_file(db, tmp_path / "a.json", "sm_90", env=ENV, with_host=with_host)
    text = (tmp_path / "a.json").read_text()
    assert ("tuner-7" in text) == with_host and text.count('"host"') == int(with_host)
    assert [e.host for e in cfg.entries] == ["tuner-7" if with_host else "", ""]
    with TuningDB(str(tmp_path / "other.sqlite")) as other:
        ex.import_file(other, tmp_path / "a.json", env=ENV)
        assert [w.host for w in other.winners(env=ENV)] == ["tuner-7" if with_host else "", ""]


def test_an_old_file_with_hosts_loads_and_serves():
    """The file as shipped before hosts were left out (format 1, every entry with a host)."""
    path = Path(__file__).parent / "data" / "config_v1_with_host.json"
    cfg = ex.load_config_file(path)
    assert cfg.header.schema_version == 1 and {e.host for e in cfg.entries} == {"vm"}
    running = ENV.model_copy(update={"kernel_hash": cfg.header.kernel_hash, "triton_version": "3.9.0"})
    served = [w for w, _ in cfg.serving(running).values()]
    assert len(served) == len(cfg.entries) and all(w.other_triton and w.host == "vm" for w in served)


# warp_specialize, removed from GemmConfig: rows stored before carry it. (value stored, what reading does)
RETIRED_WS = [(False, None), (True, "winners row .* warp_specialize was removed")]


@pytest.mark.parametrize("stored, refusal", RETIRED_WS, ids=["false", "true"])
def test_a_row_stored_with_warp_specialize_reads_false_and_refuses_true(db, stored, refusal):
    db.import_winners([winner(key(m=16), env=ENV)])
    old = json.dumps({**SMALL.model_dump(mode="json"), "warp_specialize": stored}, sort_keys=True)
    with make_engine(db.url).begin() as conn:
        conn.execute(text("UPDATE winners SET config_json = :old"), {"old": old})
    if refusal is None:
        assert [w.config for w in db.winners(env=ENV)] == [SMALL]
    else:
        with pytest.raises(TuningDBError, match=refusal):
            db.winners(env=ENV)


def test_coverage_counts_other_versions_and_strict_refuses_them():
    winners = [read_as(ENV, w) for w in (winner(key(m=16), env=ENV_OLD_TRITON), winner(key(m=32), env=ENV),
                                         winner(key(m=48), env=ENV_NEW_KERNELS),
                                         winner(key(m=64), env=ENV_OLD_TRITON), winner(key(m=64), env=ENV))]
    problems = [Problem(m, 96, 64, "fp16") for m in (16, 32, 48, 64)]
    assert [(g.problem.m, g.reason) for g in coverage_gaps(problems, "sm_90", winners)] == [
        (48, "only stale winners (triton 3.6.0, kernels k2)")]
    assert [(g.problem.m, g.reason) for g in coverage_gaps(problems, "sm_90", winners, strict=True)] == [
        (16, "only winners of another triton version (3.5.0); --strict wants the running version's"),
        (48, "only stale winners (triton 3.6.0, kernels k2)")]
    assert other_triton_counts(winners) == {"3.5.0": 2}


def test_a_tuning_run_under_a_new_triton_adds_its_rows_beside_the_old(tmp_path, monkeypatch):
    from tritonblas import identity
    from tritonblas.tuning.protocol import BenchResult
    from tritonblas.tuning.run import tune_problems

    h200 = device_for_arch("sm_90", "NVIDIA H200", 132)
    problem = Problem(64, 128, 256, "fp16")
    old = EnvIdentity.current().model_copy(update={"triton_version": "3.6.0"})
    with TuningDB(str(tmp_path / "tune.sqlite")) as db:
        db.upsert_winner(winner(key(64, 128, 256), ms=9.0, env=old))
        monkeypatch.setattr(identity, "triton_version", lambda: "3.9.0")
        rows = tune_problems([problem], h200, db, bench=lambda config, p, d: BenchResult("ok", 1.0),
                             top_k=2, neighbour_seeds=0)
        assert [r.status for r in rows] == ["tuned"]  # another version's winner does not count as done
        assert [(w.env.triton_version, w.other_triton) for w in db.winners()] == [
            ("3.6.0", True), ("3.9.0", False)]
        assert db.lookup(key(64, 128, 256)).env.triton_version == "3.9.0"
        cfg = ex.export_file(db, tmp_path / "sm_90.json", "sm_90")
    assert sorted(ex.load_config_file(tmp_path / "sm_90.json").triton_of(e) for e in cfg.entries) == [
        "3.6.0", "3.9.0"]
