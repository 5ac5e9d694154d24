"""The closed vocabularies of the backend schema: dtype names, families, topology kinds.

Kept as plain tuples in one place so that spec files, validation and error messages all agree on
the spelling, and so a typo such as ``fp8e4m3`` fails loudly with the valid list.
"""

from __future__ import annotations

__all__ = ["DTYPES", "FAMILIES", "TOPOLOGIES", "TRANSCENDENTALS", "VECTOR_OPS", "PRICE_BASES", "CATALOG_PRICE_BASIS"]

#: Dtypes a rate table may name, widest first. Integer rates are OP/s (vendors' TOPS).
#: FP8 has two formats; when a vendor quotes one "FP8" rate both entries carry it.
DTYPES: tuple[str, ...] = (
    "fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp4", "int8", "int4",
)

#: Execution-model families; each has its own schema class and cost model.
#: gpu = SIMT with tensor cores; tpu = systolic matrix units (Google TPU, AWS Trainium, Intel Gaudi
#: MME); dataflow = spatial ASICs (Groq, Cerebras, SambaNova); cpu = cores x SIMD (x AMX).
FAMILIES: tuple[str, ...] = ("gpu", "tpu", "dataflow", "cpu")

#: How devices of one network level are wired. "switch": any-to-any through switches (NVSwitch);
#: "full-mesh": a direct link to every peer (AMD Infinity Fabric, Gaudi RoCE); "torus"/"mesh":
#: nearest-neighbour grids with/without wraparound (TPU ICI, Trainium NeuronLink); "ring"; and
#: "fat-tree": a Clos network of switches (InfiniBand / Ethernet scale-out); "single": one device.
TOPOLOGIES: tuple[str, ...] = ("switch", "full-mesh", "torus", "mesh", "ring", "fat-tree", "single")

#: Functions a ``transcendental_flops`` table may name (the canonical elementwise ops counted as
#: transcendentals), plus "default" for the others. Rates are evaluations per second.
TRANSCENDENTALS: tuple[str, ...] = (
    "default", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "gelu", "silu", "elu", "selu",
    "softplus", "mish", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
    "atanh",
)

#: Vector ops a ``vector_op_flops`` table may name: ops whose eager kernels reach a rate of their
#: own (several passes, reductions, windows) that FLOPs over the SIMD peak would overstate.
#: Rates are input elements per second.
VECTOR_OPS: tuple[str, ...] = (
    "layer_norm", "rms_norm", "batch_norm", "group_norm", "instance_norm", "softmax", "log_softmax",
    "pool", "reduce_sum", "reduce_mean", "reduce_max", "cumsum", "gather", "resize", "conv_depthwise",
)

#: What a target's ``price_per_hour`` is, so that a verdict never ranks a discount against a list
#: price unawares. "hyperscaler-on-demand": the on-demand list price of an AWS, Google Cloud, Azure
#: or Oracle instance in a US region divided by its chips (the catalog's one basis; Google Cloud
#: prices GPUs on N1 VMs per accelerator, the VM billed on top, and such a chip's file says so);
#: "other-on-demand": another provider's published on-demand price, used only where no hyperscaler
#: list read rents the chip.
PRICE_BASES: tuple[str, ...] = ("hyperscaler-on-demand", "other-on-demand")

#: The basis every catalog price has unless its file says otherwise (and its notes say why).
CATALOG_PRICE_BASIS = "hyperscaler-on-demand"
