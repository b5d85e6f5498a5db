"""Checkpoint format: exact round trip, refusal of damaged/foreign files, verified HTTP download."""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from _inputs import TOOLS, edit_model_config, make_mapped, raises_unchanged

import biomjepa as bj
from biomjepa import _pretrained
from biomjepa._pretrained import load_model, resolve_checkpoint
from biomjepa.model import (
    CONFIG,
    MANIFEST,
    WEIGHTS,
    BiomJEPA,
    CheckpointError,
    checkpoint_sha256,
    load_checkpoint,
    save_checkpoint,
    write_manifest,
)
from biomjepa.nn import ModelConfig


def _model(seed=0):
    torch.manual_seed(seed)
    return BiomJEPA(ModelConfig.preset("tiny"))


def test_round_trip_is_exact(tmp_path):
    m = _model()
    save_checkpoint(m, tmp_path / "c", provenance={"note": "test"})
    loaded = load_checkpoint(tmp_path / "c")
    for (k, a), (k2, b) in zip(m.encoder.state_dict().items(), loaded.encoder.state_dict().items()):
        assert k == k2 and torch.equal(a, b)
    meta = json.loads((tmp_path / "c" / CONFIG).read_text())
    assert meta["provenance"] == {"note": "test"}
    assert meta["vocab_hash"] == bj.data.vocab.Vocab.default().hash
    assert loaded.config == m.config and not loaded.training


def test_bf16_storage_loads_as_float32(tmp_path):
    m = _model()
    save_checkpoint(m, tmp_path / "c", dtype=torch.bfloat16)
    loaded = load_checkpoint(tmp_path / "c")
    w = loaded.encoder.gene_embedding.weight
    assert w.dtype == torch.float32
    torch.testing.assert_close(w, m.encoder.gene_embedding.weight.detach(), rtol=1e-2, atol=1e-3)


def test_corrupted_and_truncated_weights_refused(tmp_path):
    save_checkpoint(_model(), tmp_path / "c")
    data = bytearray((tmp_path / "c" / WEIGHTS).read_bytes())
    data[-10] ^= 0xFF
    (tmp_path / "c" / WEIGHTS).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted or truncated"):
        load_checkpoint(tmp_path / "c")
    (tmp_path / "c" / WEIGHTS).write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(CheckpointError, match="corrupted or truncated"):
        load_checkpoint(tmp_path / "c")


def test_other_vocabulary_refused(tmp_path):
    save_checkpoint(_model(), tmp_path / "c")
    meta = json.loads((tmp_path / "c" / CONFIG).read_text())
    meta["vocab_hash"] = "0123456789abcdef"
    (tmp_path / "c" / CONFIG).write_text(json.dumps(meta))
    write_manifest(tmp_path / "c", [CONFIG, WEIGHTS])  # a consistent checkpoint of another vocabulary
    with pytest.raises(CheckpointError, match="another vocabulary"):
        load_checkpoint(tmp_path / "c")


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="not a biomjepa checkpoint"):
        load_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match="neither a registered name"):
        resolve_checkpoint(str(tmp_path / "missing"))


def test_lazy_cached_loading(tmp_path):
    """Loaded once: every call gets its own module over the same cached weight tensors."""
    save_checkpoint(_model(), tmp_path / "c")
    a, b = load_model(str(tmp_path / "c")), load_model(str(tmp_path / "c"))
    assert a is not b
    assert a.encoder.gene_embedding.weight.data_ptr() == b.encoder.gene_embedding.weight.data_ptr()


def test_http_download_verified(http_root, tmp_path, monkeypatch):
    root, url = http_root
    src = save_checkpoint(_model(), tmp_path / "c")
    shutil.copytree(src, root / "tiny")
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "cache")
    sha = checkpoint_sha256(src)  # the whole checkpoint, not only the weights
    model = load_model(f"{url}/tiny#sha256={sha}")
    assert model.info["checkpoint_sha256"] == sha
    assert (tmp_path / "cache" / "checkpoints" / sha[:16] / WEIGHTS).is_file()
    with pytest.raises(ValueError, match="expected"):
        resolve_checkpoint(f"{url}/tiny", sha256="0" * 64)
    with pytest.raises(ValueError, match="needs its sha256"):
        resolve_checkpoint(f"{url}/tiny")


def test_save_and_download_never_follow_a_planted_symlink(http_root, tmp_path):
    """Issue 24: save_checkpoint wrote `model.safetensors.tmp`, `config.json.tmp` and `SHA256SUMS.<pid>.tmp`, and a
    download `<file>.<pid>.part` and `SHA256SUMS.download`: a symlink planted under one of those names made the
    package overwrite a file outside the directory."""
    import os

    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    ck = tmp_path / "ck"
    ck.mkdir()
    for name in (f"{WEIGHTS}.tmp", f"{CONFIG}.tmp", f"SHA256SUMS.{os.getpid()}.tmp"):
        (ck / name).symlink_to(outside)
    save_checkpoint(_model(), ck)
    assert outside.read_text() == "precious"
    assert load_checkpoint(ck).config == _model().config
    root, url = http_root
    for name in (CONFIG, WEIGHTS, "SHA256SUMS"):
        shutil.copy(ck / name, root / name)
    sha = checkpoint_sha256(ck)
    target = tmp_path / "cache" / "checkpoints" / sha[:16]
    target.mkdir(parents=True)
    for name in ("SHA256SUMS.download", *(f"{n}.{os.getpid()}.part" for n in (CONFIG, WEIGHTS, "SHA256SUMS"))):
        (target / name).symlink_to(outside)
    assert resolve_checkpoint(f"{url}#sha256={sha}")[0] == target
    assert outside.read_text() == "precious"


@pytest.fixture
def trickle_url(tmp_path, monkeypatch):
    """A loopback server that promises 1,000 bytes and sends one every 0.1 s; the cache goes to ``tmp_path``."""
    import http.server
    import threading
    import time

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            try:
                for _ in range(1000):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:  # the client gave up
                pass

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "cache")
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_trickling_download_stops_at_the_deadline(trickle_url, tmp_path, monkeypatch):
    """Issue 24: a server trickling bytes never ended the download; now bj.settings.download_timeout does."""
    import time

    monkeypatch.setattr(bj.settings, "download_timeout", 1.5)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"did not finish within bj.settings.download_timeout = 1.5 s.*checkpoint="):
        resolve_checkpoint(f"{trickle_url}/ck", sha256="a" * 64)
    assert time.monotonic() - t0 < 4
    assert [p.name for p in (tmp_path / "cache" / "checkpoints" / ("a" * 16)).iterdir()] == []  # no partial file
    for bad in (0, -1, float("nan"), float("inf"), "60", True):
        with pytest.raises(ValueError, match="download_timeout must be a positive, finite number"):
            bj.settings.download_timeout = bad


def test_download_timeout_takes_a_numpy_number(monkeypatch):
    """Issue 68: a numpy float32 (a value read from an array or a config) was refused as no number."""
    import numpy as np

    monkeypatch.setattr(bj.settings, "_download_timeout", bj.settings.download_timeout)  # given back after the test
    for value in (np.float32(2.5), np.float64(2.5), np.int64(30)):
        bj.settings.download_timeout = value
        assert bj.settings.download_timeout == float(value) and type(bj.settings.download_timeout) is float
    for bad in (np.float32("nan"), np.float32(-1), np.bool_(True)):
        with pytest.raises(ValueError, match="download_timeout must be a positive, finite number"):
            bj.settings.download_timeout = bad


def test_download_progress_follows_the_progress_setting(http_root, tmp_path, capsys, monkeypatch):
    root, url = http_root
    src = save_checkpoint(_model(), tmp_path / "c")
    shutil.copytree(src, root / "tiny")
    sha = checkpoint_sha256(src)
    monkeypatch.setattr(type(bj.settings), "show_progress", property(lambda self: False))
    resolve_checkpoint(f"{url}/tiny#sha256={sha}")
    assert f"{WEIGHTS}:" not in capsys.readouterr().err
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "cache2")
    monkeypatch.setattr(type(bj.settings), "show_progress", property(lambda self: True))
    monkeypatch.setattr("biomjepa._pretrained.interactive", lambda: False)  # redirected output: no bar
    resolve_checkpoint(f"{url}/tiny#sha256={sha}")
    assert f"{WEIGHTS}:" not in capsys.readouterr().err
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "cache3")
    monkeypatch.setattr("biomjepa._pretrained.interactive", lambda: True)  # a terminal or a notebook
    resolve_checkpoint(f"{url}/tiny#sha256={sha}")
    assert f"{WEIGHTS}:" in capsys.readouterr().err  # a tqdm bar per file


def test_unwritable_cachedir_is_a_clear_error(http_root, tmp_path, monkeypatch):
    _, url = http_root
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(bj.settings, "_cachedir", blocker / "sub")
    with pytest.raises(PermissionError, match="cachedir"):
        resolve_checkpoint(f"{url}/x", sha256="a" * 64)


def test_fixed_feature_statistics_round_trip_and_standardize_every_cell_alike(tmp_path):
    import numpy as np

    from biomjepa.data.collate import collate
    from biomjepa.data.tokenize import TokenizedCells
    from biomjepa.nn.readout import readout_entry

    m = _model()
    D = m.config.embedding_dim
    mean, scale = np.linspace(-1, 1, D), np.linspace(0.5, 2, D)
    save_checkpoint(m, tmp_path / "c", readout=readout_entry(mean, scale, n_cells=10, source="test"))
    loaded = load_checkpoint(tmp_path / "c")
    rng = np.random.default_rng(0)
    genes = np.sort(rng.choice(500, 30, replace=False))
    cells = TokenizedCells(np.array([0, 30]), genes, rng.random(30).astype(np.float32) + 1, np.array([1e4]))
    batch = collate(cells, m.config.vocab_size)
    with torch.no_grad():
        raw, std = m(batch), loaded(batch)
    expect = (raw.double() - torch.tensor(mean)) / torch.tensor(scale)
    assert torch.allclose(std.double(), expect, atol=1e-5)
    with torch.no_grad():  # the cached-model view that every tool uses keeps the statistics
        assert torch.allclose(load_model(str(tmp_path / "c"))(batch), std)
    meta = json.loads((tmp_path / "c" / CONFIG).read_text())
    assert meta["readout"]["standardize"] and meta["readout"]["n_cells"] == 10
    # edited statistics are refused on load (the manifest is rewritten so only the check below can fail)
    meta["readout"]["scale"][0] = 0.0
    (tmp_path / "c" / CONFIG).write_text(json.dumps(meta))
    write_manifest(tmp_path / "c", [CONFIG, WEIGHTS])
    with pytest.raises(CheckpointError, match=r"scale must be > 0"):
        load_checkpoint(tmp_path / "c")
    with pytest.raises(ValueError, match=r"readout\.mean"):
        save_checkpoint(m, tmp_path / "d", readout={"standardize": True, "mean": [0.0], "scale": [1.0]})
    assert not (tmp_path / "d").exists()



def test_fixed_whitening_round_trips_and_is_refused_when_malformed(tmp_path):
    """A readout record with a ``whiten`` matrix: the loaded model returns ((z − mean) / scale) @ W for every
    cell alike; a matrix of the wrong shape or with a non-finite entry is refused before anything is written."""
    import numpy as np

    from biomjepa.data.collate import collate
    from biomjepa.data.tokenize import TokenizedCells
    from biomjepa.nn.readout import readout_entry

    m = _model()
    D = m.config.embedding_dim
    rng = np.random.default_rng(1)
    mean, scale, W = rng.normal(size=D), rng.uniform(0.5, 2, D), rng.normal(size=(D, D)) / np.sqrt(D)
    save_checkpoint(m, tmp_path / "w", readout=readout_entry(mean, scale, whiten=W, n_cells=10, source="test"))
    loaded = load_checkpoint(tmp_path / "w")
    genes = np.sort(rng.choice(500, 30, replace=False))
    cells = TokenizedCells(np.array([0, 30]), genes, rng.random(30).astype(np.float32) + 1, np.array([1e4]))
    batch = collate(cells, m.config.vocab_size)
    with torch.no_grad():
        raw, out = m(batch), loaded(batch)
    expect = ((raw.double() - torch.tensor(mean)) / torch.tensor(scale)) @ torch.tensor(W)
    assert torch.allclose(out.double(), expect, atol=1e-4)
    with pytest.raises(ValueError, match=r"readout\.whiten must be"):
        readout_entry(mean, scale, whiten=W[:, :-1], n_cells=10, source="test")
    bad = W.copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match=r"readout\.whiten holds a non-finite"):
        save_checkpoint(m, tmp_path / "x", readout={**readout_entry(mean, scale, n_cells=1, source="t"),
                                                    "whiten": bad.tolist()})
    assert not (tmp_path / "x").exists()

# ---------------------- config.json edited or malformed, the manifest, broken checkpoints through the tools
@pytest.fixture
def unpinned(tmp_path) -> Path:
    """A checkpoint without SHA256SUMS (as written before the manifest existed), with run provenance."""
    torch.manual_seed(0)
    path = save_checkpoint(BiomJEPA(ModelConfig.preset("tiny")), tmp_path / "old",
                           provenance={"config": {"model": "tiny", "model_overrides": {}}})
    (path / MANIFEST).unlink()
    return path


def _edit_config(path: Path, fn) -> None:
    meta = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(fn(meta) if callable(fn) else fn)


def test_edited_heads_in_unpinned_checkpoint_is_caught_by_provenance(unpinned):
    meta = json.loads((unpinned / "config.json").read_text())
    heads = meta["model"]["n_heads"]
    _edit_config(unpinned, lambda m: json.dumps({**m, "model": {**m["model"], "n_heads": heads * 2}}))
    with pytest.raises(CheckpointError, match=rf"config.json: 'model.n_heads' is {heads * 2}.*n_heads={heads}.*edited"):
        load_checkpoint(unpinned)


def test_unpinned_checkpoint_warns_and_names_the_fix(unpinned):
    _edit_config(unpinned, lambda m: json.dumps({**m, "provenance": {}}))
    with pytest.warns(UserWarning, match=r"no SHA256SUMS manifest.*bj\.train\.export"):
        model = load_checkpoint(unpinned)
    assert model.config.n_heads == ModelConfig.preset("tiny").n_heads


def test_pinned_and_bundled_checkpoints_do_not_warn(tiny_checkpoint):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_checkpoint(tiny_checkpoint)
        load_checkpoint(_pretrained._bundled_dir("_models/biomjepa-mini-v0.1"))


@pytest.mark.parametrize(("edit", "named"), [
    ('{"format": "biomjepa-checkpoint", "model": ', "not valid JSON"),
    ("[1, 2]", "holds a JSON list"),
    (lambda m: json.dumps({k: v for k, v in m.items() if k != "model"}), "key 'model' is missing"),
    (lambda m: json.dumps({**m, "model": None}), "key 'model' is missing or not an object"),
    (lambda m: json.dumps({**m, "model": {k: v for k, v in m["model"].items() if k != "d_model"}}), r"lacks the keys \['d_model'\]"),
    (lambda m: json.dumps({**m, "model": {**m["model"], "d_model": "32"}}), r"'model.d_model' is '32' \(str\); expected int"),
    (lambda m: json.dumps({**m, "model": {**m["model"], "n_layers": 2.5}}), r"'model.n_layers' is 2.5"),
    (lambda m: json.dumps({**m, "model": {**m["model"], "n_heads": 0}}), r"'model.n_heads' is 0 \(int\); expected int >= 1"),
    (lambda m: json.dumps({**m, "model": {**m["model"], "colour": 1}}), r"unknown key 'model.colour'"),
    (lambda m: json.dumps({**m, "format_version": "1"}), "has format"),
])
def test_malformed_config_json_names_the_file_and_key(unpinned, edit, named):
    _edit_config(unpinned, edit)
    with pytest.raises(CheckpointError, match=named) as err:
        load_checkpoint(unpinned)
    assert "config.json" in str(err.value) or str(unpinned) in str(err.value)


def test_manifest_lists_every_checkpoint_file(ckpt):
    lines = (ckpt / MANIFEST).read_text().splitlines()
    assert [line.split("  ")[1] for line in lines] == sorted([CONFIG, WEIGHTS])
    for line in lines:
        digest, name = line.split("  ")
        assert hashlib.sha256((ckpt / name).read_bytes()).hexdigest() == digest
    assert checkpoint_sha256(ckpt) == hashlib.sha256((ckpt / MANIFEST).read_bytes()).hexdigest()


def test_edited_config_is_refused(ckpt, tmp_path):
    edited = shutil.copytree(ckpt, tmp_path / "edited")
    edit_model_config(edited, attn_eps=1e-2)  # loads fine without the manifest, and changes the embeddings
    with pytest.raises(CheckpointError, match=r"config\.json is corrupted or truncated.*SHA256SUMS"):
        load_checkpoint(edited)
    with pytest.raises(CheckpointError, match="SHA256SUMS"):
        bj.load_model(str(edited))


CHECKPOINT_ERRORS = {
    "foreign_vocab": (CheckpointError, "was trained on another vocabulary"),
    "truncated": (CheckpointError, "is corrupted or truncated: sha256"),
    "bad_json": (CheckpointError, "is not valid JSON.*corrupted"),
    "missing": (FileNotFoundError, "neither a registered name.*Pass `checkpoint=`"),
}


@pytest.mark.parametrize("tool", list(TOOLS))
@pytest.mark.parametrize("which", list(CHECKPOINT_ERRORS))
def test_bad_checkpoints_refused(which, tool, checkpoints):
    exc, match = CHECKPOINT_ERRORS[which]
    raises_unchanged(make_mapped(), exc, match, TOOLS[tool], checkpoints[which])


@pytest.mark.parametrize(("edit", "match"), [
    (lambda r: {**r, "standardize": "false"}, r"readout\.standardize must be true or false.*'false'"),
    (lambda r: [r], r"readout must be a record .*got list"),
    (lambda r: {**r, "scale": [1e-45] * len(r["scale"])}, r"readout\.scale must be > 0 for every feature, and at least"),
    (lambda r: {**r, "mean": [1e39] * len(r["mean"])}, r"readout\.mean holds a value beyond float32"),
])
def test_readout_record_is_read_strictly(tmp_path, edit, match):
    """``"standardize": "false"`` was taken as true, a list as no statistics, float32 overflow gave
    non-finite embeddings silently (issue 30); each is a CheckpointError naming the key."""
    import numpy as np

    from biomjepa.nn.readout import readout_entry

    m = _model()
    D = m.config.embedding_dim
    save_checkpoint(m, tmp_path / "c", readout=readout_entry(np.zeros(D), np.ones(D), n_cells=10, source="test"))
    meta = json.loads((tmp_path / "c" / CONFIG).read_text())
    meta["readout"] = edit(meta["readout"])
    (tmp_path / "c" / CONFIG).write_text(json.dumps(meta))
    write_manifest(tmp_path / "c", [CONFIG, WEIGHTS])  # consistent files: only the record is wrong
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(tmp_path / "c")
    with pytest.raises(ValueError, match=match):
        save_checkpoint(m, tmp_path / "d", readout=meta["readout"])
    assert not (tmp_path / "d").exists()


def test_non_finite_weights_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    path = save_checkpoint(_model(), tmp_path / "c")
    state = load_file(str(path / WEIGHTS))
    name = sorted(state)[0]
    state[name][..., 0] = float("nan")
    save_file(state, str(path / WEIGHTS))
    meta = json.loads((path / CONFIG).read_text())
    meta["weights_sha256"] = hashlib.sha256((path / WEIGHTS).read_bytes()).hexdigest()
    (path / CONFIG).write_text(json.dumps(meta))
    write_manifest(path, [CONFIG, WEIGHTS])
    with pytest.raises(CheckpointError, match=rf"NaN or Inf weights .*{name}"):
        load_checkpoint(path)


def test_feature_statistics_chunk_by_chunk_are_the_float64_ones():
    import numpy as np

    from biomjepa.nn.readout import feature_stats

    Z = np.random.default_rng(0).normal(3, 2, size=(1001, 7)).astype(np.float32)
    Z[:, 6] = 1.0  # a constant feature gets the floor, not 0
    mean, scale = feature_stats(Z, chunk=64)
    np.testing.assert_allclose(mean, Z.astype(np.float64).mean(0), rtol=1e-12)
    np.testing.assert_allclose(scale[:6], Z[:, :6].astype(np.float64).std(0), rtol=1e-10)
    assert scale[6] == 1e-6
    with pytest.raises(ValueError, match="at least one"):
        feature_stats(Z[:0])


def test_an_empty_checkpoint_reference_is_refused_not_read_as_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for ref in ("", "  "):
        with pytest.raises(ValueError, match=r"checkpoint=.* is empty: pass a registered name"):
            resolve_checkpoint(ref)
