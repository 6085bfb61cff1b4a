"""DeepSpeed, PyTorch FSDP and Megatron-LM side by side, as data, and a rule
of thumb that suggests a parallel strategy for a model size and a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucourse.checks import count as _count, positive as _positive


# -----------------------------------------------------------------------------
# The frameworks side by side


@dataclass(frozen=True)
class Framework:
    name: str
    strategies: tuple[str, ...]
    reported: str  # a reported result or overhead, as the source states it
    reported_date: str  # when the source was published, "YYYY-MM"
    source: str  # bib key(s), comma-separated
    use_when: str


FRAMEWORKS = (
    Framework(
        "DeepSpeed (ZeRO)",
        ("data parallel", "ZeRO stages 1-3", "CPU/NVMe offload", "pipeline parallel"),
        "ZeRO-100B trained models of over 100B parameters on 400 GPUs at 15 PFLOP/s, "
        "8x the model size and 10x the throughput of the previous state of the art; "
        "ZeRO-3 sends 1.5x the bytes of data parallelism",
        "2020-11", "rajbhandari2020zero,rasley2020deepspeed",
        "the model's training state does not fit one GPU but the model is not huge, "
        "and the links are modest: shard everything, keep plain data-parallel code"),
    Framework(
        "PyTorch FSDP",
        ("data parallel", "full sharding (ZeRO-3 style)", "hybrid sharding", "CPU offload"),
        "performance comparable to DistributedDataParallel while training significantly "
        "larger models, with near-linear scaling in TFLOPS",
        "2023-08", "zhao2023fsdp",
        "the same regime as ZeRO-3, staying inside PyTorch; composes with PyTorch's own "
        "tensor parallelism for larger models"),
    Framework(
        "Megatron-LM",
        ("tensor parallel", "pipeline parallel (interleaved 1F1B)", "data parallel",
         "sequence parallel"),
        "8.3B parameters on 512 V100 GPUs at 15.1 PFLOP/s, 76% scaling efficiency (2019); "
        "1T parameters on 3072 A100 GPUs at 502 PFLOP/s, 52% of peak (2021)",
        "2021-11", "shoeybi2019megatron,narayanan2021megatron",
        "very large models on NVLink nodes joined by InfiniBand: tensor parallel inside a "
        "node, pipeline and data parallel across nodes"),
)


# Mixed-precision training with Adam keeps 16 bytes per parameter: fp16
# parameters and gradients (2 + 2) and fp32 master weights, momentum and
# variance (4 + 4 + 4) (Rajbhandari et al., 2020, section 3.1).
TRAINING_BYTES_PER_PARAM = 16


def suggest_strategy(n_params, gpu_memory_bytes, gpus_per_node, fast_intra_node=True,
                     fast_inter_node=True) -> str:
    """A first choice of strategy from model size and interconnect.

    A rule of thumb, not an optimiser: it counts only the 16 bytes per
    parameter of mixed-precision Adam (activations need room too).
    * the training state fits one GPU: data parallelism (DDP);
    * it fits when sharded over one node: ZeRO-3 / FSDP;
    * otherwise tensor parallelism inside a node (only if the node has NVLink),
      pipeline and data parallelism across nodes (Megatron-LM, or
      DeepSpeed with Megatron); over slow inter-node links, shard within a
      node and keep cross-node traffic to one gradient reduction.
    """
    psi = _positive("n_params", n_params)
    memory = _positive("gpu_memory_bytes", gpu_memory_bytes)
    per_node = _count("gpus_per_node", gpus_per_node)
    state = TRAINING_BYTES_PER_PARAM * psi
    if state <= memory:
        return "DDP"
    if state <= memory * per_node:
        return "FSDP/ZeRO-3"
    if not fast_intra_node:
        return "FSDP/ZeRO-3 + offload"
    return "TP + PP + DP (Megatron-LM)" if fast_inter_node else "TP in node + hybrid-shard DP"
