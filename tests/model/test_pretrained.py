"""Resolving a checkpoint (``biomjepa._pretrained``): registry and URL pins cover every file, pins are
checked before any path is made, download errors name the URL, the cache directory, the cached model."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from _inputs import edit_model_config, make_mapped, raises_unchanged

import biomjepa as bj
from biomjepa import _pretrained
from biomjepa.model import CONFIG, MANIFEST, WEIGHTS, CheckpointError, checkpoint_sha256


def test_upper_case_pin_is_accepted(tiny_checkpoint):
    digest = checkpoint_sha256(tiny_checkpoint)
    path, _ = _pretrained.resolve_checkpoint(tiny_checkpoint, sha256=digest.upper())
    assert path == Path(tiny_checkpoint)


def test_upper_case_pin_downloads(http_root, tiny_checkpoint):
    root, base = http_root
    shutil.copytree(tiny_checkpoint, root / "ck")
    digest = checkpoint_sha256(tiny_checkpoint)
    path, _ = _pretrained.resolve_checkpoint(f"{base}/ck#sha256={digest.upper()}")
    assert checkpoint_sha256(path) == digest


@pytest.mark.parametrize("pin", ["../../../../tmp/evil", "abc", "g" * 64, " " * 3])
def test_non_hex_pin_is_refused_before_any_path_is_made(tmp_path, monkeypatch, pin):
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "cache")
    with pytest.raises(ValueError, match="is not a sha256 digest"):
        _pretrained.resolve_checkpoint(f"http://127.0.0.1:9/x#sha256={pin}")
    assert not (tmp_path / "cache").exists() and not list(tmp_path.rglob("config.json"))


def test_unreachable_url_names_it_and_the_manual_route(tmp_path, monkeypatch):
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "cache")
    with pytest.raises(OSError, match=r"Could not download http://127\.0\.0\.1:9/ck/SHA256SUMS.*checkpoint="):
        _pretrained.resolve_checkpoint("http://127.0.0.1:9/ck#sha256=" + "a" * 64)


def test_404_names_the_url(http_root):
    _, base = http_root
    with pytest.raises(FileNotFoundError, match=rf"{base}/nothing/config.json does not exist \(HTTP 404\).*checkpoint="):
        _pretrained.resolve_checkpoint(f"{base}/nothing#sha256=" + "a" * 64)


def test_registry_entry_pins_every_file(ckpt, tmp_path, monkeypatch):
    bundled = shutil.copytree(ckpt, tmp_path / "pkg" / "_models" / "m")
    monkeypatch.setattr(_pretrained, "_bundled_dir", lambda rel: tmp_path / "pkg" / rel)
    entry = {"path": "_models/m", "version": "9", "checkpoint_sha256": checkpoint_sha256(ckpt)}
    monkeypatch.setitem(_pretrained.REGISTRY, "pinned", entry)
    assert bj.load_model("pinned").info["checkpoint_sha256"] == entry["checkpoint_sha256"]
    edit_model_config(bundled, n_heads=4)  # weights untouched: a weights-only pin would not notice
    bj.model.write_manifest(bundled, [CONFIG, WEIGHTS])  # a consistent, but different, checkpoint
    with pytest.raises(ValueError, match="does not match its registry checkpoint_sha256"):
        _pretrained.resolve_checkpoint("pinned")
    (bundled / MANIFEST).unlink()  # removing the manifest does not make it a weights-only pin
    with pytest.raises(ValueError, match="does not match its registry checkpoint_sha256"):
        _pretrained.resolve_checkpoint("pinned")


def test_an_entry_sharing_weights_is_put_together_in_the_cache_and_pinned(ckpt, tmp_path, monkeypatch):
    """v0.2.1 ships no weights of its own (``weights_from``: v0.2's, held once in the wheel): its directory is put
    together in the cache, loads with its own pin, is rebuilt when incomplete, and a foreign weights file is refused."""
    pkg = tmp_path / "pkg"
    shutil.copytree(ckpt, pkg / "_models" / "a")
    (pkg / "_models" / "b").mkdir()
    for name in (CONFIG, MANIFEST):
        shutil.copyfile(ckpt / name, pkg / "_models" / "b" / name)
    monkeypatch.setattr(_pretrained, "_bundled_dir", lambda rel: pkg / rel)
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "cache")
    entry = {"path": "_models/b", "weights_from": "_models/a", "version": "9", "checkpoint_sha256": checkpoint_sha256(ckpt)}
    monkeypatch.setitem(_pretrained.REGISTRY, "shared", entry)
    path, name = _pretrained.resolve_checkpoint("shared")
    assert name == "shared-v9" and path.parent == tmp_path / "cache" / "bundled"
    assert checkpoint_sha256(path) == entry["checkpoint_sha256"] and not (pkg / "_models" / "b" / WEIGHTS).exists()
    assert bj.load_model("shared").info["checkpoint_sha256"] == entry["checkpoint_sha256"]
    (path / WEIGHTS).unlink()  # an incomplete directory is put together again
    assert _pretrained.resolve_checkpoint("shared")[0] == path and checkpoint_sha256(path) == entry["checkpoint_sha256"]
    (path / WEIGHTS).unlink()
    (path / WEIGHTS).write_bytes((pkg / "_models" / "a" / WEIGHTS).read_bytes()[:-8] + bytes(8))  # a foreign file
    with pytest.raises(CheckpointError, match=WEIGHTS):
        bj.load_model("shared")
    assert sorted(p.name for p in (tmp_path / "cache" / "bundled").iterdir()) == [path.name]  # no scratch left
    shutil.rmtree(path)
    monkeypatch.setattr(bj.settings, "_cachedir", pkg / "_models" / "a" / WEIGHTS)  # a file: no cache there
    with pytest.raises(PermissionError, match="cachedir"):
        _pretrained.resolve_checkpoint("shared")


def test_url_pin_covers_config_json(ckpt, http_root):
    root, url = http_root
    served = shutil.copytree(ckpt, root / "c")
    pin = checkpoint_sha256(ckpt)
    edit_model_config(served, attn_eps=1e-2)
    with pytest.raises(CheckpointError, match=r"config\.json is corrupted"):
        _pretrained.resolve_checkpoint(f"{url}/c#sha256={pin}")
    (served / MANIFEST).unlink()  # a server without the manifest: it is computed from the downloads
    with pytest.raises(ValueError, match=f"expected {pin}"):
        _pretrained.resolve_checkpoint(f"{url}/c#sha256={pin}")
    shutil.copy(ckpt / CONFIG, served / CONFIG)
    path, _ = _pretrained.resolve_checkpoint(f"{url}/c#sha256={pin.upper()}")
    assert checkpoint_sha256(path) == pin


def test_weights_only_pin_is_explained(ckpt, http_root):
    root, url = http_root
    shutil.copytree(ckpt, root / "c")
    weights = json.loads((ckpt / CONFIG).read_text())["weights_sha256"]
    with pytest.raises(ValueError, match=f"pins only model.safetensors.*{checkpoint_sha256(ckpt)}"):
        _pretrained.resolve_checkpoint(f"{url}/c#sha256={weights}")
    with pytest.raises(ValueError, match="not a sha256 digest"):
        _pretrained.resolve_checkpoint(f"{url}/c#sha256=../../{'0' * 58}")


def test_a_local_directory_is_pinned_as_a_url_is(ckpt, tmp_path):
    """Issue 46: ``DIR#sha256=`` pins a directory by the whole checkpoint, wherever a reference is taken."""
    pin = checkpoint_sha256(ckpt)
    assert _pretrained.resolve_checkpoint(f"{ckpt}#sha256={pin.upper()}") == (ckpt, str(ckpt))
    edited = shutil.copytree(ckpt, tmp_path / "edited")
    edit_model_config(edited, n_heads=4)
    bj.model.write_manifest(edited, [CONFIG, WEIGHTS])  # consistent, but another checkpoint
    with pytest.raises(ValueError, match=f"has sha256 {checkpoint_sha256(edited)}, expected {pin}"):
        _pretrained.resolve_checkpoint(f"{edited}#sha256={pin}")
    weights = json.loads((ckpt / CONFIG).read_text())["weights_sha256"]
    with pytest.raises(ValueError, match=f"pins only model.safetensors.*{pin}"):
        _pretrained.resolve_checkpoint(f"{ckpt}#sha256={weights}")
    with pytest.raises(FileNotFoundError, match=r"Checkpoint directory '.*nowhere' \(pinned by"):
        _pretrained.resolve_checkpoint(f"{tmp_path / 'nowhere'}#sha256={pin}")


def test_non_writable_cache_dir(monkeypatch, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(bj.settings, "cachedir", blocker / "cache")
    url = "http://127.0.0.1:9/ckpt#sha256=" + "0" * 64  # never contacted: the cache fails first
    raises_unchanged(make_mapped(), PermissionError, r"Cannot create the cache directory.*bj\.settings\.cachedir",
                     bj.tl.embed, checkpoint=url, device="cpu")


def test_moving_a_loaded_model_does_not_move_the_cached_one(ckpt):
    first = bj.load_model(str(ckpt))
    reference = first.encoder.gene_embedding.weight.detach().clone()
    first.to("meta").train()  # what a caller's `.to("cuda")` does, on any machine
    again = bj.load_model(str(ckpt))
    assert again.encoder.gene_embedding.weight.device.type == "cpu" and not again.training
    assert torch.equal(again.encoder.gene_embedding.weight, reference)
    if torch.cuda.is_available():
        bj.load_model(str(ckpt)).to("cuda")
        assert bj.load_model(str(ckpt)).encoder.gene_embedding.weight.device.type == "cpu"


def test_a_pin_of_an_earlier_default_names_the_release_it_now_is():
    """Issue 68: a script that pinned ``biomjepa-mini#sha256=`` with v0.4's digest got a bare mismatch; it is told
    that digest is now ``biomjepa-mini-v0.4``, and the pin to give."""
    pin = _pretrained.REGISTRY["biomjepa-mini-v0.4"]["checkpoint_sha256"]
    said = (f"expected {pin}; refusing it. That digest is now 'biomjepa-mini-v0.4' ('biomjepa-mini' names the newer "
            f"release '{_pretrained.DEFAULT_RELEASE}'): give 'biomjepa-mini-v0.4#sha256={pin}'")
    with pytest.raises(ValueError, match=re.escape(said)):
        _pretrained.resolve_checkpoint(f"biomjepa-mini#sha256={pin}")
    assert _pretrained.resolve_checkpoint(f"biomjepa-mini-v0.4#sha256={pin}")[1] == "biomjepa-mini-v0.4"  # as said
    weights = _pretrained.REGISTRY["biomjepa-mini-v0.4"]["sha256"]  # its weights' digest: the same advice
    with pytest.raises(ValueError, match=re.escape(f"give 'biomjepa-mini-v0.4#sha256={pin}'")):
        _pretrained.resolve_checkpoint("biomjepa-mini", sha256=weights)
    with pytest.raises(ValueError, match=r"expected a{64}; refusing it\.$"):  # the digest of nothing registered
        _pretrained.resolve_checkpoint("biomjepa-mini#sha256=" + "a" * 64)
