"""ResNet-50 on GPUs against NVIDIA's published throughputs, fp32 (TF32 where the GPU has it) and fp16.

Why: a convnet's fp32 time on an Ampere-or-later GPU depends on a framework default, not on the
chip alone. PyTorch runs fp32 cuDNN convolutions on TF32 tensor cores unless told not to
(``torch.backends.cudnn.allow_tf32`` is True) while its fp32 matmuls stay full precision, so the
catalog's NVIDIA Ampere+ targets carry ``conv_fp32_as_tf32`` and ``--fp32-conv`` overrides it. This
script sets the predictions beside published whole-model measurements of the same network, with and
without that default, on chips with and without TF32, so the default is judged against measurements
rather than by itself. Nothing is fitted to these rows.

    python benchmarks/published_convnets.py      # ~1 minute; writes results/published_convnets.{md,json}

Each prediction is eager PyTorch (``fusion="none"``: one kernel per op) at batch 256, 224x224, on the
bundled ResNet-50 (v1.5, as NVIDIA's): inference a forward pass; training one step with SGD momentum,
as the sources train. fp16 rows hold the whole model in fp16 (``--weights fp16 --activations fp16``),
the published ones ran autocast (AMP), which keeps a few ops in fp32.

Sources (the published throughput, images/s):
* DLE-PT: NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md
  (commit 291f0d0), pytorch-21.03 NGC container: inference on 1x V100 16GB and T4 at batch 256,
  training on 1 GPU of a DGX A100 (80GB) and a DGX-1 (V100 16GB).
* DLE-PD: NVIDIA DeepLearningExamples, PaddlePaddle ResNet50 v1.5 README: inference on 1x A100 80GB,
  TF32, batch 256 (``--run-scope eval_only``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import narrowpipe  # noqa: E402
from narrowpipe.costmodel.serving.formats import Formats  # noqa: E402
from narrowpipe.costmodel.training import build_training_graph  # noqa: E402
from narrowpipe.models.examples import load_example  # noqa: E402

from _common import RESULTS, env_header, environment, md_table, no_options, publish  # noqa: E402

BATCH = 256
#: (target, dtype, phase, published images/s, source)
PUBLISHED = [
    ("v100", "fp32", "inference", 1261, "DLE-PT"),
    ("v100", "fp16", "inference", 3382, "DLE-PT"),
    ("t4", "fp32", "inference", 415, "DLE-PT"),
    ("t4", "fp16", "inference", 1198, "DLE-PT"),
    ("a100", "fp32", "inference", 3284, "DLE-PD"),
    ("v100", "fp32", "training", 367, "DLE-PT"),
    ("v100", "fp16", "training", 1200, "DLE-PT"),
    ("a100", "fp32", "training", 938, "DLE-PT"),
    ("a100", "fp16", "training", 2470, "DLE-PT"),
]


def predict(target: str, dtype: str, phase: str, fp32_conv: str) -> narrowpipe.Report:
    graph = load_example("resnet50")
    if dtype == "fp16":
        graph = Formats.of("fp16", "fp16").apply(graph)
    if phase == "training":
        graph = build_training_graph(graph, optimizer="momentum")
    return narrowpipe.analyze(graph, target, fusion="none", fp32_conv=fp32_conv, dims={"batch": BATCH})


def main() -> int:
    rows, data = [], []
    for target, dtype, phase, published, source in PUBLISHED:
        report = predict(target, dtype, phase, "default")
        full = predict(target, dtype, phase, "highest") if dtype == "fp32" else report
        t = report.timing
        assert t is not None and full.timing is not None
        ips, ips_full = BATCH / t.time_s, BATCH / full.timing.time_s
        data.append({"target": target, "dtype": dtype, "phase": phase, "batch": BATCH, "source": source,
                     "published_images_per_s": published, "predicted_images_per_s": ips,
                     "precision": t.precision, "error": ips / published - 1,
                     "predicted_images_per_s_full_fp32_convs": ips_full,
                     "error_full_fp32_convs": ips_full / published - 1})
        rows.append([target, dtype, phase, t.precision, f"{published:,}", f"{ips:,.0f}", f"{ips / published - 1:+.0%}",
                     f"{ips_full:,.0f} ({ips_full / published - 1:+.0%})" if dtype == "fp32" else "-", source])
    env = environment()
    md = ("# ResNet-50 on GPUs vs published throughput (batch 256, eager)\n\n" + env_header(env) + "\n"
          + md_table(["target", "dtype", "phase", "precision (default)", "published img/s", "predicted img/s",
                      "error", "with --fp32-conv highest", "source"], rows, "llllrrrrl")
          + "\nError = predicted / published throughput - 1. The last column times fp32 convolutions at full "
          "precision, what narrowpipe did before `conv_fp32_as_tf32`; on V100 and T4 (no TF32) it equals the "
          "default. Sources: see the script's docstring.\n")
    return publish(RESULTS / "published_convnets", md, {"env": env, "rows": data})


if __name__ == "__main__":
    no_options(__doc__)
    sys.exit(main())
