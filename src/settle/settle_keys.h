// The decisions that need no machine: each turns a key written "auto" (or left unset) into
// the value the run takes, and records what it became and why in config->autos. SettleRunConfig
// (settle.h) calls them in its order; the decisions that need the machine's memory are in
// settle_autos.h.
#pragma once

#include <string>

#include "strata/status.h"
#include "src/config/train_config.h"

namespace strata {

// Settles the compute dtype for blocks running on a GPU (`on_gpu`) or on this CPU:
// bf16.enabled "auto" becomes bf16 on a GPU or where the CPU has native bf16 (AVX512-BF16,
// AMX; see CpuHasNativeBf16), fp32 otherwise, recorded in config->autos; bf16 forced on a
// CPU without native bf16 sets precision_warning (LibTorch's bf16 matmuls run ~10x slower
// than fp32 there). Fills precision_reason either way. Idempotent.
void ResolvePrecision(TrainConfig* config, bool on_gpu);

// Records what a key written "auto" became and why, replacing what an earlier settling recorded.
void RecordAuto(TrainConfig* config, const std::string& path, std::string value, std::string reason);

// Settles layer_major: as written, or for "auto" layer-major when the step has several
// micro-batches and each visit of a block fetches its working weights (from NVMe, or, off
// the host, over the host link): those fetches then happen once per step instead of once per
// micro-batch. Records what "auto" became and why.
void ResolveSchedule(SettledConfig* config, bool host_device);

// Settles strata.loss_chunk and strata.mlp_chunk "auto" to the tiles AutoLossChunk and
// AutoMlpChunk choose (src/config/tile_sizes.cc), and records why.
void ResolveTileSizes(TrainConfig* config);

// Settles keep_activations: kNever keeps, kAlways recomputes, kAuto keeps when `fits` (the
// estimate with kept activations fits this machine). Records what "auto" became and why.
void ResolveRecompute(SettledConfig* config, bool fits);

// Settles accumulate_on_device: off on the host device and with one micro-batch per step;
// else as written, or for "auto" when `fits` (the estimate with device accumulators fits the
// device and the host). Records what "auto" became and why.
void ResolveDeviceAccumulation(SettledConfig* config, bool host_device, bool fits);

// Derives the batch keys left unset for `world_size` ranks (DeepSpeed's rule above) and
// checks their consistency; records what each "auto" became in config->autos. The error
// names the keys and the numbers ("train_batch_size 30 is not divisible by ...").
Status ResolveBatch(TrainConfig* config, int world_size);
// sequence_parallel_size against the world and the model: groups that divide the world, rows
// and heads that split over a group, and what is not split yet refused by name. The ranks the
// batch rule counts: world / sequence_parallel_size.
StatusOr<int> CheckSequenceParallel(const TrainConfig& config, int world_size);
// tensor_parallel.autotp_size against the world and the model, as CheckSequenceParallel
// (Note [Tensor parallel]). The data ranks that read different batches: world / (sequence x
// tensor).
StatusOr<int> CheckTensorParallel(const TrainConfig& config, int world_size);
// For the start-up line: "4 rank(s)", or the data ranks and how the model-parallel groups split
// each layer and row.
std::string DescribeRanks(const TrainConfig& config, int world_size);

// What strata.objective needs of the settled batch and tiles (Note [DPO]: pairs in a
// micro-batch, whole logits); the error names the key.
Status CheckObjective(const TrainConfig& config);

}  // namespace strata
