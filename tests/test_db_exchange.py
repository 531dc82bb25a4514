"""Config files: deterministic export, atomic validated import, policies, coverage check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.bad_inputs import BAD_EDITS, BAD_TEXTS, edit_json
from helpers.db import (
    BIG,
    ENV,
    ENV_NEW_KERNELS,
    ENV_OTHER_TORCH,
    SMALL,
    T0,
    grid_winners,
    key,
    quant_key,
    winner,
)

from tritonblas.problem import Problem
from tuning_db import EnvIdentity, TuningDB
from tuning_db import exchange as ex
from tuning_db.coverage import coverage_gaps


def test_export_twice_and_round_trip_are_byte_identical(db, tmp_path):
    db.import_winners(grid_winners(7) + [winner(key(m=16, n=64, k=32), ms=9.0, env=ENV_OTHER_TORCH)])
    ex.export_file(db, tmp_path / "a.json", "sm_90", env=ENV)
    ex.export_file(db, tmp_path / "b.json", "sm_90", env=ENV)
    with TuningDB(str(tmp_path / "empty.sqlite")) as other:
        report = ex.import_file(other, tmp_path / "a.json", env=ENV)
        assert (report.entries, report.written, report.kept, report.stale) == (7, 7, 0, False)
        ex.export_file(other, tmp_path / "c.json", "sm_90", env=ENV)
    a = (tmp_path / "a.json").read_bytes()
    assert a == (tmp_path / "b.json").read_bytes() == (tmp_path / "c.json").read_bytes()
    text = a.decode()
    assert text.endswith("}\n") and text.count("\n") == 14 + 7  # 14 lines of frame and header, one per entry
    data = json.loads(text)
    assert list(data) == ["header", "entries"]
    assert data["header"] == {"arch": "sm_90", "count": 7, "date": "2026-11-01", "device_name": "NVIDIA H200",
                              "kernel_hash": "k1", "schema_version": 1, "sm_count": 132,
                              "triton_version": "3.6.0"}
    assert [e["m"] for e in data["entries"]] == [16 * (i + 1) for i in range(7)]
    # The slower duplicate from another torch version lost to the fastest fresh result of that key.
    assert data["entries"][0]["torch_version"] == "2.13.0"


def test_header_date_is_the_newest_entry_not_today(db, tmp_path):
    db.import_winners([winner(key(m=1), at=T0), winner(key(m=2), at=T0.replace(year=2027, month=3))])
    cfg = ex.export_file(db, tmp_path / "x.json", "sm_90", env=ENV)
    assert cfg.header.date.isoformat() == "2027-03-01"


def test_export_takes_fresh_winners_of_one_device(db, tmp_path):
    db.import_winners([winner(key(m=1)), winner(key(m=2), env=ENV_NEW_KERNELS),
                       winner(key(m=3, arch="gfx942", device_name="MI300X", sm_count=304))])
    cfg = ex.export_file(db, tmp_path / "x.json", "sm_90", env=ENV)
    assert [e.m for e in cfg.entries] == [1]
    db.upsert_winner(winner(key(m=4, device_name="NVIDIA H100", sm_count=132)))
    with pytest.raises(ValueError, match="several devices.*'NVIDIA H100'.*--device"):
        ex.export_file(db, tmp_path / "y.json", "sm_90", env=ENV)
    cfg = ex.export_file(db, tmp_path / "y.json", "sm_90", device_name="NVIDIA H100", env=ENV)
    assert [e.m for e in cfg.entries] == [4]
    with pytest.raises(ValueError, match="no winners of the running kernels for arch sm_80"):
        ex.export_file(db, tmp_path / "z.json", "sm_80", env=ENV)
    with pytest.raises(ValueError, match="unknown arch 'sm_99'"):
        ex.export_file(db, tmp_path / "z.json", "sm_99", env=ENV)
    assert not (tmp_path / "z.json").exists()


@pytest.mark.parametrize("name,path,value,message", BAD_EDITS, ids=[b[0] for b in BAD_EDITS])
def test_bad_file_is_rejected_naming_the_entry_and_nothing_is_imported(db, good_file, tmp_path, name, path,
                                                                       value, message):
    db.upsert_winner(winner(key(m=16, n=64, k=32), ms=5.0))  # a row the import would replace
    before = db.winners(env=ENV)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(edit_json(json.loads(good_file.read_text()), path, value)))
    with pytest.raises(ex.ConfigFileError, match=message) as exc:
        ex.import_file(db, bad, env=ENV)
    assert str(bad) in str(exc.value)
    assert db.winners(env=ENV) == before


@pytest.mark.parametrize("name,mutate,message", BAD_TEXTS, ids=[b[0] for b in BAD_TEXTS])
def test_malformed_text_is_rejected(db, good_file, tmp_path, name, mutate, message):
    bad = tmp_path / "bad.json"
    bad.write_text(mutate(good_file.read_text()))
    with pytest.raises(ex.ConfigFileError, match=message):
        ex.import_file(db, bad, env=ENV)
    assert db.winners(env=ENV) == []


def test_oversized_and_binary_files_are_rejected_unread(db, good_file, tmp_path, monkeypatch):
    monkeypatch.setattr(ex, "MAX_FILE_BYTES", 100)
    with pytest.raises(ex.ConfigFileError, match="larger than the 100-byte limit"):
        ex.load_config_file(good_file)
    monkeypatch.undo()
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ex.ConfigFileError, match="not UTF-8"):
        ex.load_config_file(binary)
    with pytest.raises(ex.ConfigFileError, match="cannot read config file"):
        ex.load_config_file(tmp_path / "missing.json")


@pytest.mark.parametrize("policy,expected_ms,written", [
    ("faster", {16: 0.5, 32: 0.1}, 1),  # the file's 16 is faster; the DB's 32 is faster
    ("file", {16: 0.5, 32: 0.5 + 1 / 7}, 2),
    ("db", {16: 5.0, 32: 0.1}, 0),
])
def test_import_policies(db, tmp_path, policy, expected_ms, written):
    with TuningDB(str(tmp_path / "src.sqlite")) as src:
        src.import_winners(grid_winners(2))  # m=16 at 0.5 ms, m=32 at 0.64 ms
        ex.export_file(src, tmp_path / "f.json", "sm_90", env=ENV)
    db.import_winners([winner(key(m=16, n=64, k=32), ms=5.0), winner(key(m=32, n=65, k=32), ms=0.1)])
    report = ex.import_file(db, tmp_path / "f.json", policy, env=ENV)
    assert (report.written, report.kept) == (written, 2 - written)
    assert {w.key.m: w.median_ms for w in db.winners(env=ENV)} == pytest.approx(expected_ms)
    sources = {w.key.m: w.source for w in db.winners(env=ENV)}
    assert sources[16] == ("imported" if policy in ("faster", "file") else "tuned")
    with pytest.raises(ValueError, match="policy"):
        db.import_winners([], "newest")


def test_import_of_a_stale_file_is_kept_but_not_used(db, good_file):
    report = ex.import_file(db, good_file, env=ENV_NEW_KERNELS)
    assert report.stale and report.written == 3
    assert db.get_winner(key(m=16, n=64, k=32), ENV_NEW_KERNELS) is None
    assert all(w.stale for w in db.winners(env=ENV_NEW_KERNELS))


def test_config_file_lookup_serves_its_arch_when_fresh(good_file):
    cfg = ex.load_config_file(good_file)
    other_device = key(m=16, n=64, k=32, device_name="NVIDIA H100", sm_count=114)
    assert cfg.lookup(other_device, ENV) == SMALL
    assert cfg.lookup(key(m=16, n=64, k=32, layout="tt"), ENV) is None
    assert cfg.lookup(key(m=16, n=64, k=32, arch="sm_80"), ENV) is None
    assert cfg.lookup(other_device, ENV_NEW_KERNELS) is None  # stale file: a miss
    assert [w.source for w in cfg.winners(ENV)] == ["imported"] * 3


def test_coverage_gaps_names_missing_and_stale_problems():
    winners = [winner(key(m=16), config=BIG), winner(key(m=32), env=ENV_NEW_KERNELS, stale=True)]
    problems = [Problem(16, 96, 64, "fp16"), Problem(32, 96, 64, "fp16"), Problem(16, 96, 64, "bf16")]
    gaps = coverage_gaps(problems, "sm_90", winners)
    assert [(g.problem.m, g.problem.dtype, g.reason) for g in gaps] == [
        (32, "fp16", "only stale winners (triton 3.6.0, kernels k2)"), (16, "bf16", "no winner")]
    assert len(coverage_gaps(problems, "gfx942", winners)) == 3


def test_shipped_config_files_all_validate():
    from tritonblas.selection import sources

    files = sorted(sources.SHIPPED_DIR.glob("*.json"))
    assert files
    for path in files:
        cfg = ex.load_config_file(path)
        assert path.stem == cfg.header.arch  # dispatch finds configs/<arch>.json by name


def test_quantized_winners_export_with_their_scales_and_import_back(db, tmp_path):
    quantized = [quant_key(m=64, scales="row"), quant_key(m=64, scales="tensor"),
                 quant_key(m=64, b="e5m2"), quant_key(m=64, a="int8", b="int8", out="fp32", scales="row_b")]
    db.import_winners([winner(k, ms=1.0 + i) for i, k in enumerate([*quantized, key(m=64)])])
    ex.export_file(db, tmp_path / "a.json", "sm_90", env=ENV)
    entries = json.loads((tmp_path / "a.json").read_text())["entries"]
    # "scales" is written for the quantized problems only: a plain entry reads as before the field.
    assert sorted(e.get("scales", "-") for e in entries) == ["-", "row", "row", "row_b", "tensor"]
    with TuningDB(str(tmp_path / "other.sqlite")) as other:
        assert ex.import_file(other, tmp_path / "a.json", env=ENV).written == 5
        assert {k: other.lookup(k, ENV).median_ms for k in quantized} == {
            k: 1.0 + i for i, k in enumerate(quantized)}
        ex.export_file(other, tmp_path / "b.json", "sm_90", env=ENV)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    cfg = ex.load_config_file(tmp_path / "a.json")
    assert cfg.lookup(quantized[1], ENV) == SMALL and cfg.lookup(quant_key(m=64, scales="row_a"), ENV) is None


def test_the_shipped_file_exports_back_to_its_bytes(tmp_path):
    # configs/sm_90.json imported into an empty database and exported again: the same text, but for the
    # retired "warp_specialize": false its configs still carry (GemmConfig reads and drops it).
    shipped = Path(__file__).parent.parent / "configs" / "sm_90.json"
    header = ex.load_config_file(shipped).header
    env = EnvIdentity(triton_version=header.triton_version, torch_version="any",
                      kernel_hash=header.kernel_hash, timing_protocol="any")
    with TuningDB(str(tmp_path / "db.sqlite")) as db:
        ex.import_file(db, shipped, env=env)
        ex.export_file(db, tmp_path / "sm_90.json", "sm_90", env=env)
    retired = shipped.read_text()
    for text in ('"warp_specialize": false, ', ', "warp_specialize": false'):
        retired = retired.replace(text, "")
    assert (tmp_path / "sm_90.json").read_text() == retired
    # A plain row carries no "scales" (the file's bytes from before the key existed); a quantized one does.
    for entry in json.loads(retired)["entries"]:
        assert ("scales" in entry) == (entry["a_dtype"] in ("e4m3", "e5m2", "int8")), entry
