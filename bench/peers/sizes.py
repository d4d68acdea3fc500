"""The peers' model sizes, torch-free (scripts/gpu_run.sh reads them): name: (d_model, n_layer,
n_head, n_kv_head, ffn_hidden); vocabulary 32000, sequence 2048."""
SIZES = {
    "1b": (2048, 16, 32, 8, 8192),
    # 7 B's layers, 20 of them: DeepSpeed's ZeRO-3 CPU offload holds ~18 B/param in host memory,
    # which the 7 B overran on the GPU machine's 128 GiB (killed); this one fits it.
    "4.3b": (4096, 20, 32, 32, 11008),
    "7b": (4096, 32, 32, 32, 11008),
    "13b": (5120, 40, 40, 40, 13824),
    "20b": (6144, 44, 48, 8, 16384),
    "30b": (6656, 60, 52, 52, 17920),
}
