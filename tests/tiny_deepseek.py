"""One tiny DeepSeek-V3 config (multi-head latent attention, routed and shared experts, a dense first
layer) for the serving tests that count MLA's bytes and FLOPs by hand, so they read the same dims."""

from __future__ import annotations

#: heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, layers, hidden size
H, R, DN, DR, DV, LAYERS, HIDDEN = 4, 32, 32, 16, 32, 2, 256
TINY_DEEPSEEK = {"model_type": "deepseek_v3", "vocab_size": 1000, "hidden_size": HIDDEN, "intermediate_size": 512,
                 "moe_intermediate_size": 64, "num_hidden_layers": LAYERS, "num_attention_heads": H,
                 "num_key_value_heads": H, "n_shared_experts": 1, "n_routed_experts": 8,
                 "routed_scaling_factor": 2.5, "kv_lora_rank": R, "q_lora_rank": 64, "qk_rope_head_dim": DR,
                 "v_head_dim": DV, "qk_nope_head_dim": DN, "n_group": 2, "topk_group": 1, "num_experts_per_tok": 2,
                 "first_k_dense_replace": 1, "norm_topk_prob": True, "max_position_embeddings": 4096}
