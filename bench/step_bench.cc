#include "bench/step_bench.h"

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/libtorch_reference.h"
#include "src/data/data.h"
#include "src/device/compute_device.h"
#include "src/engine/engine.h"
#include "src/config/train_config.h"
#include "src/estimate/estimator.h"
#include "src/settle/settle.h"
#include "src/model/model.h"
#include "strata/check.h"
#include "strata/log.h"

namespace strata::bench {
namespace {

// One configuration of the comparison, with its own engine, device and trace.
struct Variant {
  std::string name;
  TrainConfig cfg;  // as written: settled for its device when its engine is made
  std::unique_ptr<Communicator> comm, device_comm;
  std::unique_ptr<ComputeDevice> device;
  std::unique_ptr<Tracer> tracer = std::make_unique<Tracer>();
  std::unique_ptr<Engine> engine;  // last: destroyed first
  std::unique_ptr<LibTorchReference> reference;  // --vs-libtorch's anchor: no engine
  std::vector<double> ms, wait_ms, nvme_mb, copy_ms, optimizer_ms, optimizer_wait_ms;
};

// The offload modes on the configured device, or (--fake-device) the synchronous and the
// overlapped schedule on the fake device with copies modelled at `fake_gbps`.
// `base` as written (each variant settles its own); `settled`: base settled, for the reference.
Status MakeVariants(const StepBenchOptions& o, const TrainConfig& base, const TrainConfig& settled,
                    const MachineCapacity& machine, std::vector<Variant>* out) {
  if (o.vs_libtorch) {
    Variant ref;
    ref.name = "libtorch";
    ref.cfg = base;
    STRATA_ASSIGN_OR_RETURN(ref.reference, LibTorchReference::Create(settled));
    out->push_back(std::move(ref));
    Variant v;
    v.name = "strata";
    v.cfg = base;
    v.comm = MakeSingleRankCommunicator();
    STRATA_ASSIGN_OR_RETURN(OpenedDevice opened, OpenComputeDevice(v.cfg.device, 0, v.comm.get()));
    v.device_comm = std::move(opened.collectives);
    v.device = std::move(opened.device);
    out->push_back(std::move(v));
  } else if (o.optimizer_overlap) {
    for (OptimizerOverlap mode : {OptimizerOverlap::kNone, OptimizerOverlap::kForward, OptimizerOverlap::kSpeculative,
                                  OptimizerOverlap::kDelayed}) {
      // The delayed update (not the same arithmetic) where it applies: working weights on NVMe.
      if (mode == OptimizerOverlap::kDelayed && (base.offload_param.device != Tier::kNvme ||
                                                 base.resident_blocks > 0 || base.model.lora.r > 0))
        continue;
      Variant v;
      v.name = mode == OptimizerOverlap::kNone ? "plain" : OptimizerOverlapName(mode);
      v.cfg = base;
      v.cfg.optimizer_overlap = mode;
      v.comm = MakeSingleRankCommunicator();
      STRATA_ASSIGN_OR_RETURN(OpenedDevice opened, OpenComputeDevice(v.cfg.device, 0, v.comm.get()));
      v.device_comm = std::move(opened.collectives);
      v.device = std::move(opened.device);
      out->push_back(std::move(v));
    }
  } else if (o.fake_device_gbps > 0) {
    // With accumulation, also the overlapped schedule with the sums on the device (Note
    // [Device accumulation]): one gradient copy per step instead of one per micro-batch.
    for (int variant = 0; variant < (base.grad_accum > 1 ? 3 : 2); ++variant) {
      Variant v;
      v.name = variant == 0 ? "synchronous" : variant == 1 ? "overlapped" : "device sums";
      v.cfg = base;
      v.cfg.device_accumulation = variant == 2 ? 1 : 0;
      v.comm = MakeSingleRankCommunicator();
      v.device_comm = MakeSingleRankCommunicator();
      auto fake = MakeFakeAsyncDevice(v.device_comm.get(), {.seed = 1, .max_delay_us = 0, .copy_gbps = o.fake_device_gbps});
      v.device = variant > 0 ? std::move(fake) : MakeSynchronousDevice(std::move(fake));
      out->push_back(std::move(v));
    }
  } else {
    for (Tier d : {Tier::kDevice, Tier::kCpu, Tier::kNvme}) {
      Variant v;
      v.name = OffloadDeviceName(d);
      v.cfg = base;
      v.cfg.offload_param.device = v.cfg.zero_stage == 3 ? d : Tier::kDevice;
      v.cfg.offload_optimizer.device = d;
      v.comm = MakeSingleRankCommunicator();
      STRATA_ASSIGN_OR_RETURN(OpenedDevice opened, OpenComputeDevice(v.cfg.device, 0, v.comm.get()));
      v.device_comm = std::move(opened.collectives);
      v.device = std::move(opened.device);
      out->push_back(std::move(v));
    }
  }
  for (Variant& v : *out) {
    if (v.reference) continue;
    // Each variant's "auto"s settled as train would settle them on this machine, one rank.
    const bool host = v.device->is_host();
    auto settled = SettleRunConfig(v.cfg, {1, 1, !host && o.fake_device_gbps <= 0, {host}, &machine});
    if (!settled.ok()) return settled.status().WithContext(v.name);
    auto e = Engine::Create(settled->config, v.comm.get(), v.tracer.get(), {}, v.device.get());
    if (!e.ok()) return e.status().WithContext(v.name);
    v.engine = std::move(e).value();
  }
  return Status();
}

const ComputeDevice& AnyDevice(const std::vector<Variant>& vs) {
  for (const Variant& v : vs)
    if (v.device) return *v.device;
  STRATA_CHECK(false) << "no variant has a device";
  return *vs[0].device;
}

void PrintTable(const StepBenchOptions& o, const SettledConfig& base, std::vector<Variant>& vs, int64_t tokens,
                double flops_per_token, double peak) {
  auto tflops = [&](double step_ms) { return tokens * flops_per_token / (step_ms / 1e3) / 1e12; };
  const bool fake = o.fake_device_gbps > 0;
  std::printf("bench step: %s, %lld tokens per step, 1 rank, ZeRO stage %d, %s compute on %s; activations %s; %d steps per "
              "variant, interleaved\n", base.model.arch == model::Arch::kGpt2 ? "GPT-2" : "LLaMA", (long long)tokens,
              base.zero_stage, DTypeName(base.compute_dtype), AnyDevice(vs).Name().c_str(),
              base.keep_activations ? "kept" : "recomputed per block", o.steps);
  const char* kind = o.vs_libtorch ? "trainer" : o.optimizer_overlap ? "optimizer" : fake ? "schedule" : "offload";
  Table t({kind, "step ms", "tokens/s", "TFLOPS", "MFU", "exposed ms", "device copies ms", "hidden", "optimizer ms",
           "exposed opt. ms", "nvme MB/step", o.vs_libtorch ? "time / libtorch" : o.optimizer_overlap ? "time / plain" : fake ? "time / sync" : "time / none"});
  const Summary anchor = Summarize(vs[0].ms);
  for (Variant& v : vs) {
    const Summary s = Summarize(v.ms);
    const double copy = Summarize(v.copy_ms).median, wait = Summarize(v.wait_ms).median;
    t.Row({v.name, Format(s, 1), fmt::format("{:.0f}", tokens / (s.median / 1e3)), fmt::format("{:.3f}", tflops(s.median)),
           peak > 0 ? fmt::format("{:.1f}%", 100 * tflops(s.median) / peak) : std::string("-"),
           fmt::format("{:.2f}", wait), fmt::format("{:.2f}", copy),
           copy > 0 ? fmt::format("{:.0f}%", 100 * std::max(0.0, 1 - wait / copy)) : std::string("-"),
           fmt::format("{:.2f}", Summarize(v.optimizer_ms).median), fmt::format("{:.2f}", Summarize(v.optimizer_wait_ms).median),
           fmt::format("{:.1f}", Summarize(v.nvme_mb).median), fmt::format("{:.2f}", s.median / anchor.median)});
  }
  t.Print(stdout);
  std::printf("median (min-max); exposed = time the compute thread waited for transfers; device copies = time the "
              "host<->device copy queues were busy; hidden = 1 - exposed / copies; optimizer = its time per step on "
              "its thread, exposed opt. = the compute thread waiting for it; TFLOPS = model FLOPs (%.3g per token) / "
              "step time; MFU against %s\n", flops_per_token,
              peak > 0 ? fmt::format("{:.1f} TFLOPS dense {} ({})", peak, DTypeName(base.compute_dtype),
                                     AnyDevice(vs).Name()).c_str()
                       : "no stated peak (the host; pass --peak-tflops)");
}

// One step of a variant: its engine's, or the LibTorch reference's. Sets *tokens.
Status StepVariant(Variant& v, int64_t step, const data::TokenDataset& data, int64_t* tokens) {
  if (v.reference) {
    v.reference->Step(step, data);
    *tokens = v.cfg.micro_batch * v.cfg.model.seq_len * v.cfg.grad_accum;
    return Status();
  }
  STRATA_ASSIGN_OR_RETURN(StepStats st, v.engine->Step(step, data));
  *tokens = st.tokens;
  return Status();
}

Status FinishVariant(Variant& v) { return v.engine ? v.engine->Finish() : Status(); }


}  // namespace

int RunStepBench(const StepBenchOptions& o) {
  auto fail = [](const Status& s) {
    LogError("bench step: {}", s.ToString());
    return 1;
  };
  std::string origin = "built-in tiny config";
  auto text = ComposeConfigText(o.config_path, o.default_config_json, "", o.sets, &origin);
  if (!text.ok()) return fail(text.status());
  auto written = ParseTrainConfig(*text, origin);
  if (!written.ok()) return fail(written.status());
  const MachineCapacity machine = ProbeMachine(*written);
  const bool on_gpu = o.fake_device_gbps <= 0 && SpecNamesGpu(written->device);
  auto settled = SettleRunConfig(*written, {1, 1, on_gpu, {!on_gpu}, &machine});  // as train would, on one rank
  if (!settled.ok()) return fail(settled.status().WithContext(origin));
  const SettledConfig* base = &*settled->config;  // what the table describes
  if (!base->precision_warning.empty()) LogWarn("{}", base->precision_warning);
  auto data = data::TokenDataset::Open(base->data, base->model.vocab_size, base->model.seq_len);
  if (!data.ok()) return fail(data.status());

  std::vector<Variant> vs;
  if (Status s = MakeVariants(o, *written, *base, machine, &vs); !s.ok()) return fail(s);
  // Phases of kPhase steps per variant, interleaved (the machine drifts). Work a variant
  // leaves running in the background (its optimizer, its device queues) is finished inside
  // its own phase and counted there: otherwise it would run during another variant's steps.
  constexpr int kPhase = 4;
  int64_t tokens = 0;
  for (Variant& v : vs) {  // warm-up: one step each
    Status st = StepVariant(v, 0, **data, &tokens);
    if (st.ok()) st = FinishVariant(v);
    if (!st.ok()) return fail(st.WithContext(v.name));
  }
  for (int done = 0; done < o.steps; done += kPhase) {
    const int k = std::min(kPhase, o.steps - done);
    for (size_t i = 0; i < vs.size(); ++i) {
      Variant& v = vs[(done / kPhase) % 2 ? vs.size() - 1 - i : i];  // the order alternates
      Tracer& t = *v.tracer;
      t.Trim(t.Now());
      const double t0 = t.Now();
      for (int j = 0; j < k; ++j)
        if (Status st = StepVariant(v, 1 + done + j, **data, &tokens); !st.ok()) return fail(st.WithContext(v.name));
      if (Status f = FinishVariant(v); !f.ok()) return fail(f.WithContext(v.name));
      const double per = 1e3 / k;  // per step, ms
      v.ms.push_back((t.Now() - t0) * per);
      v.wait_ms.push_back(t.Total(Track::kWait, t0) * per);
      v.copy_ms.push_back((t.Busy(Track::kCopyIn, t0) + t.Busy(Track::kCopyOut, t0)) * per);
      v.optimizer_ms.push_back(t.Busy(Track::kOptimizer, t0) * per);
      v.optimizer_wait_ms.push_back(t.Total(Track::kOptimizerWait, t0) * per);
      v.nvme_mb.push_back((t.Bytes(Track::kNvmeRead, t0) + t.Bytes(Track::kNvmeWrite, t0)) / 1e6 / k);
    }
  }
  // Achieved model TFLOPS (6 N per token, plus attention) and MFU against the stated peak.
  const double flops_per_token = model::ModelSpec(base->model).train_flops_per_token();
  const double peak = o.peak_tflops > 0 ? o.peak_tflops : AnyDevice(vs).PeakTflops(base->compute_dtype);
  auto tflops = [&](double step_ms) { return tokens * flops_per_token / (step_ms / 1e3) / 1e12; };
  if (!o.json) {
    PrintTable(o, *base, vs, tokens, flops_per_token, peak);
    return 0;
  }
  nlohmann::json j;
  j["tokens_per_step"] = tokens;
  j["device"] = AnyDevice(vs).device().str();
  j["device_name"] = AnyDevice(vs).Name();
  j["flops_per_token"] = flops_per_token;
  j["peak_tflops"] = peak > 0 ? nlohmann::json(peak) : nlohmann::json(nullptr);
  j["steps"] = o.steps;
  if (o.fake_device_gbps > 0) j["fake_device_gbps"] = o.fake_device_gbps;
  const Summary anchor = Summarize(vs[0].ms);
  for (Variant& v : vs) {
    const Summary t = Summarize(v.ms);
    const double copy = Summarize(v.copy_ms).median, wait = Summarize(v.wait_ms).median;
    j[v.name] = {{"step_ms", t.median}, {"step_ms_min", t.min}, {"step_ms_max", t.max},
                 {"tokens_per_s", tokens / (t.median / 1e3)}, {"tflops", tflops(t.median)},
                 {"mfu", peak > 0 ? nlohmann::json(tflops(t.median) / peak) : nlohmann::json(nullptr)},
                 {"exposed_ms", wait}, {"device_copy_ms", copy},
                 {"optimizer_ms", Summarize(v.optimizer_ms).median},
                 {"exposed_optimizer_ms", Summarize(v.optimizer_wait_ms).median},
                 {"exposed_over_copy", copy > 0 ? nlohmann::json(wait / copy) : nlohmann::json(nullptr)},
                 {"nvme_mb_per_step", Summarize(v.nvme_mb).median},
                 {o.vs_libtorch ? "ratio_vs_libtorch" : o.optimizer_overlap ? "ratio_vs_plain" : o.fake_device_gbps > 0 ? "ratio_vs_synchronous" : "ratio_vs_none",
                  t.median / anchor.median}};
  }
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

}  // namespace strata::bench
