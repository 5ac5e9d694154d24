"""torch.export refusals get the fix in front of torch's message, still as a FrontendError: a transformers
KV cache passed to from_torch points at export_decode_step; a data-dependent guard from a mixture of
experts run as an eager loop names experts_implementation="grouped_mm"/"batched_mm"."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import narrowpipe  # noqa: E402
from narrowpipe.errors import FrontendError  # noqa: E402

_CACHE_CASE = """
import sys, transformers, torch, narrowpipe
from narrowpipe.errors import FrontendError
cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                               num_key_value_heads=2, vocab_size=64)
model = transformers.LlamaForCausalLM(cfg).eval()
ids = torch.randint(0, 64, (1, 4))
with torch.no_grad():
    cache = model(input_ids=ids, use_cache=True).past_key_values
assert type(cache).__name__ == "DynamicCache"
try:
    narrowpipe.from_torch(model, (), {"input_ids": ids[:, :1], "past_key_values": cache, "use_cache": True})
except FrontendError as exc:
    print("ERR", exc)
"""


def test_a_dynamic_cache_input_points_to_export_decode_step():
    """In a fresh process: export_decode_step registers DynamicCache as a pytree node for the rest of
    a process (so after it, in the same test worker, from_torch takes the cache and does not fail);
    a user's first from_torch with a cache input meets torch's pytree refusal, which gets the hint."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(narrowpipe.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", _CACHE_CASE], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    message = out.stdout.strip()
    assert message.startswith("ERR"), message[-2000:]
    assert "narrowpipe.export_decode_step" in message and "DynamicCache" in message
    assert message.index("export_decode_step") < message.index("pytree")   # the fix before torch's text


def test_eager_experts_data_dependent_guard_names_the_experts_implementation():
    cfg = transformers.MixtralConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
                                     num_key_value_heads=2, vocab_size=64, num_local_experts=4, num_experts_per_tok=2,
                                     experts_implementation="eager")
    model = transformers.MixtralForCausalLM(cfg).eval()
    with pytest.raises(FrontendError) as info:
        narrowpipe.from_torch(model, (), {"input_ids": torch.randint(0, 64, (1, 8)), "use_cache": False})
    message = str(info.value)
    assert 'experts_implementation="grouped_mm"' in message and '"batched_mm"' in message
    assert "torch.export failed for MixtralForCausalLM" in message


class _Branchy(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x


def test_a_plain_data_dependent_branch_gets_the_generic_hint():
    with pytest.raises(FrontendError) as info:
        narrowpipe.from_torch(_Branchy(), (torch.randn(3),))
    message = str(info.value)
    assert "branches on tensor values" in message and "torch._check" in message


def test_an_unrelated_failure_gets_no_hint():
    class Bad(torch.nn.Module):
        def forward(self, x):
            raise ValueError("boom")
    with pytest.raises(FrontendError) as info:
        narrowpipe.from_torch(Bad(), (torch.randn(3),))
    assert str(info.value).startswith("torch.export failed for Bad: ValueError: boom")
