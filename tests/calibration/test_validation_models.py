"""The CPU validation's architectures: each builds from its transformers config, exports, and is
predicted on a CPU target; the export counts exactly the FLOPs torch's FlopCounterMode counts for
the same eager forward. Tiny configs: no timing here (benchmarks/cpu_validate.py measures)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from narrowpipe.backends import get_target  # noqa: E402
from narrowpipe.calibration.validation_models import (  # noqa: E402
    MODELS,
    VALIDATION_MODELS,
    build_validation_model,
    validation_inputs,
    validation_label,
    validation_param_count,
)
from narrowpipe.costmodel.analyze import analyze  # noqa: E402
from narrowpipe.errors import NarrowpipeError  # noqa: E402
from narrowpipe.frontends.torch.frontend import from_torch  # noqa: E402
from narrowpipe.ir import Op  # noqa: E402


def test_the_list_covers_the_families_issue_12_names():
    assert len(VALIDATION_MODELS) >= 8
    kinds = {MODELS[n].kind for n in VALIDATION_MODELS}
    assert kinds == {"vision", "text", "seq2seq"}
    for family in ("mobilenet-v2", "convnext-tiny", "vit-base", "swin-tiny", "bert-base", "t5-small"):
        assert family in VALIDATION_MODELS
    gqa = MODELS["smollm2-135m"].config()
    assert gqa.num_key_value_heads < gqa.num_attention_heads      # grouped-query attention


def test_full_size_configs_have_the_checkpoints_parameter_counts():
    # published sizes: MobileNetV2 1.0 3.5M, ConvNeXt-T 28.6M, ResNet-50 25.6M, ViT-B/16 86.6M,
    # Swin-T 28.3M, GPT-2 124M, SmolLM2-135M 134.5M, BERT-base 109.5M, T5-small 60.5M
    expected = {"mobilenet-v2": 3.5e6, "convnext-tiny": 28.6e6, "resnet50": 25.6e6, "vit-base": 86.6e6,
                "swin-tiny": 28.3e6, "gpt2": 124.4e6, "smollm2-135m": 134.5e6, "bert-base": 109.5e6,
                "t5-small": 60.5e6}
    for name, params in expected.items():
        assert validation_param_count(name) == pytest.approx(params, rel=0.02), name


@pytest.mark.parametrize("name", VALIDATION_MODELS)
def test_each_model_exports_and_is_predicted_with_the_flops_torch_counts(name):
    model, args, kwargs = build_validation_model(name, batch=2, seq=16, tiny=True)
    # FlopCounterMode has no formula for the CPU fused SDPA kernel: the math backend runs it as
    # the matmuls it counts
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(*args, **kwargs)
    report = analyze(from_torch(model, args, kwargs), get_target("epyc-9755"), fusion="none")
    assert not report.unmodeled, report.unmodeled
    assert report.modeled_flops == counter.get_total_flops()
    assert report.time_s is not None and report.time_s > 0
    assert report.timing is not None and report.timing.kernels > 10


def test_depthwise_convnets_lower_their_depthwise_layers_as_grouped_convs():
    for name in ("mobilenet-v2", "convnext-tiny"):
        model, args, kwargs = build_validation_model(name, batch=1, tiny=True)
        graph = from_torch(model, args, kwargs)
        groups = [int(n.attrs.get("groups", 1)) for n in graph.nodes if n.op is Op.CONV]
        assert any(g > 1 for g in groups), name


def test_inputs_follow_the_batch_and_the_encoder_decoder_gets_decoder_tokens():
    model, _, kwargs = build_validation_model("t5-small", batch=1, seq=16, tiny=True)
    eight = validation_inputs("t5-small", model, 8, 16)
    assert eight["input_ids"].shape == eight["decoder_input_ids"].shape == (8, 16)
    assert kwargs["use_cache"] is False
    assert validation_label("t5-small", 8, 16) == "t5-small b8 s16"
    assert validation_label("resnet50", 8, 16) == "resnet50 b8"


def test_an_unknown_model_is_a_narrowpipe_error_naming_the_known_ones():
    with pytest.raises(NarrowpipeError, match="mobilenet-v2"):
        build_validation_model("no-such-model", 1)
