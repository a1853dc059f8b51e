"""The tiny local model pair for vLLM on a CPU: a Qwen3 target, a noisy-copy draft, a tokenizer.

Nothing is downloaded, ever: the weights come from one `numpy.random.Generator` seeded by
`TinySpec.seed`, so the same spec gives the same bytes on every machine, and the folders are
reused when their manifest says they were built from the same spec. transformers, tokenizers and
torch (all shipped with vllm) are imported only inside `build_tiny`, so the core package stays
free of them.

Why these choices (docs/reference/vllm_cpu.md): Qwen3, because with model_type qwen2
transformers 5.x ignores `tokenizer_class` and forces a tokenizer that returns empty ids; an LM
head scaled up (`logit_scale`), because random weights otherwise give near-uniform next-token
distributions and meaningless acceptance; a draft that is the target plus noise, because then
acceptance is high but not 1, and is tuned by one number (`draft_noise`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.engine.vllm.config import TinySpec

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
MANIFEST = "psdsim_tiny.json"
INIT_STD = 0.02   # transformers' default initializer_range


def default_models_dir() -> Path:
    """~/.cache/psdsim/vllm-tiny (or under $XDG_CACHE_HOME)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "psdsim" / "vllm-tiny"


def spec_digest(spec: TinySpec) -> str:
    """A short hash of the spec and of this builder's format, naming the folder it builds."""
    text = json.dumps({"format": 1, **asdict(spec)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def word(token_id: int) -> str:
    """The tokenizer's word for a non-special id: `w<id>` (so text and ids map one to one)."""
    return f"w{token_id}"


def tiny_weights(names_shapes: list[tuple[str, tuple[int, ...]]], spec: TinySpec
                 ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Target and draft tensors (float32), in the order given, from one seeded generator.

    Norm weights are ones (and the draft keeps them: noise on a norm rescales a whole layer);
    every other tensor is N(0, INIT_STD^2), the LM head times `logit_scale`. The draft's noise
    comes from a second stream of the same seed, so changing `draft_noise` leaves the target as
    it is.
    """
    target_rng, noise_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(spec.seed).spawn(2))
    target: dict[str, np.ndarray] = {}
    draft: dict[str, np.ndarray] = {}
    for name, shape in names_shapes:
        if "norm" in name:
            target[name] = np.ones(shape, dtype=np.float32)
            draft[name] = target[name].copy()
            continue
        t = target_rng.normal(0.0, INIT_STD, size=shape)
        if name.startswith("lm_head"):
            t *= spec.logit_scale
        noise = noise_rng.standard_normal(size=shape)
        target[name] = t.astype(np.float32)
        draft[name] = (t + spec.draft_noise * t.std() * noise).astype(np.float32)
    return target, draft


def _hf_config(spec: TinySpec) -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=spec.vocab, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.heads,
        head_dim=spec.hidden // spec.heads, max_position_embeddings=spec.max_positions,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        torch_dtype="float32")


def _tokenizer(spec: TinySpec) -> Any:
    """A WordLevel tokenizer: the 4 specials, then `w<id>` for every other id, split on spaces."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({word(i): i for i in range(len(SPECIALS), spec.vocab)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")


def _write_model(folder: Path, spec: TinySpec, weights: dict[str, np.ndarray], tokenizer: Any) -> None:
    import torch
    from transformers import Qwen3ForCausalLM

    with torch.device("meta"):
        model = Qwen3ForCausalLM(_hf_config(spec))
    state = {name: torch.from_numpy(w) for name, w in weights.items()}
    model.load_state_dict(state, assign=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _check_tokenizer(folder: Path, spec: TinySpec) -> None:
    """The saved tokenizer must load through AutoTokenizer (what vLLM does) and round-trip ids:
    a tokenizer class swapped on loading returns empty ids, and vLLM then rejects every prompt."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    ids = [len(SPECIALS), spec.vocab // 2, spec.vocab - 1]
    got = tok(" ".join(word(i) for i in ids), add_special_tokens=False)["input_ids"]
    if list(got) != ids:
        raise RuntimeError(f"tiny tokenizer in {folder} does not round-trip: {ids} -> {list(got)}")


def build_tiny(spec: TinySpec, root: Path | None = None) -> tuple[Path, Path]:
    """Build (or reuse) the tiny target and draft under root/<digest>/; returns their folders.

    Building takes a few seconds; the result is written to a temporary folder and renamed into
    place, so an interrupted build never leaves a half-written model that a later run would reuse.
    """
    spec.check()
    home = (root or default_models_dir()) / f"qwen3-tiny-{spec_digest(spec)}"
    target_dir, draft_dir = home / "target", home / "draft"
    manifest = {"spec": asdict(spec), "digest": spec_digest(spec)}
    if (home / MANIFEST).is_file() and json.loads((home / MANIFEST).read_text()) == manifest:
        return target_dir, draft_dir
    import torch
    from transformers import Qwen3ForCausalLM

    with torch.device("meta"):
        skeleton = Qwen3ForCausalLM(_hf_config(spec))
    names_shapes = [(n, tuple(t.shape)) for n, t in skeleton.state_dict().items()]
    target, draft = tiny_weights(names_shapes, spec)
    tokenizer = _tokenizer(spec)
    home.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{home.name}-", dir=home.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the models are not secret
    try:
        _write_model(tmp / "target", spec, target, tokenizer)
        _write_model(tmp / "draft", spec, draft, tokenizer)
        _check_tokenizer(tmp / "target", spec)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
        if home.exists():
            shutil.rmtree(home)
        tmp.rename(home)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return target_dir, draft_dir


if __name__ == "__main__":  # python -m psdsim.engine.vllm.models [ROOT]: build the default pair, print where
    import sys

    print(*build_tiny(TinySpec(), Path(sys.argv[1]) if len(sys.argv) > 1 else None), sep="\n")
