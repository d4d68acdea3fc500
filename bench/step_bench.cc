#include "bench/step_bench.h"

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "src/data/data.h"
#include "src/engine/compute_device.h"
#include "src/engine/engine.h"
#include "src/engine/train_config.h"
#include "src/model/model.h"
#include "strata/log.h"

namespace strata::bench {

int RunStepBench(const StepBenchOptions& o) {
  auto fail = [](const Status& s) {
    LogError("bench step: {}", s.ToString());
    return 1;
  };
  std::string origin = "built-in tiny config";
  auto text = ComposeConfigText(o.config_path, o.default_config_json, "", o.sets, &origin);
  if (!text.ok()) return fail(text.status());
  auto base = ParseTrainConfig(*text, origin);
  if (!base.ok()) return fail(base.status());
  ResolvePrecision(&*base, SpecNamesGpu(base->device));
  if (!base->precision_warning.empty()) LogWarn("{}", base->precision_warning);
  auto data = data::TokenDataset::Open(base->data, base->model.vocab_size, base->model.seq_len);
  if (!data.ok()) return fail(data.status());

  const OffloadDevice modes[] = {OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme};
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<Tracer>> tracers;
  std::vector<OpenedDevice> devices;  // before the engines: destroyed after them
  std::vector<std::unique_ptr<Engine>> engines;
  for (OffloadDevice d : modes) {
    TrainConfig c = *base;
    c.offload_param.device = c.zero_stage == 3 ? d : OffloadDevice::kNone;
    c.offload_optimizer.device = d;
    comms.push_back(MakeSingleRankCommunicator());
    tracers.push_back(std::make_unique<Tracer>());
    auto dev = OpenComputeDevice(c.device, 0, comms.back().get());
    if (!dev.ok()) return fail(dev.status());
    devices.push_back(std::move(dev).value());
    auto e = Engine::Create(c, comms.back().get(), tracers.back().get(), {}, devices.back().device.get());
    if (!e.ok()) return fail(e.status().WithContext(fmt::format("offload {}", OffloadDeviceName(d))));
    engines.push_back(std::move(e).value());
  }
  std::vector<double> ms[3], wait[3], nvme[3];
  int64_t tokens = 0;
  for (int s = 0; s <= o.steps; ++s) {
    for (int m = 0; m < 3; ++m) {
      auto st = engines[m]->Step(s, **data);
      if (!st.ok()) return fail(st.status());
      tracers[m]->Trim(tracers[m]->Now());
      if (s == 0) continue;  // warm-up
      ms[m].push_back(st->seconds * 1e3);
      wait[m].push_back(st->wait_s * 1e3);
      nvme[m].push_back((st->nvme_read_bytes + st->nvme_write_bytes) / 1e6);
      tokens = st->tokens;
    }
  }
  const Summary anchor = Summarize(ms[0]);
  // Achieved model TFLOPS (6 N per token, plus attention) and MFU against the stated peak.
  const double flops_per_token = model::ModelSpec(base->model).train_flops_per_token();
  const double peak = o.peak_tflops > 0 ? o.peak_tflops : devices[0].device->PeakTflops(base->compute_dtype);
  auto tflops = [&](double step_ms) { return tokens * flops_per_token / (step_ms / 1e3) / 1e12; };
  if (o.json) {
    nlohmann::json j;
    j["tokens_per_step"] = tokens;
    j["device"] = devices[0].device->device().str();
    j["device_name"] = devices[0].device->Name();
    j["flops_per_token"] = flops_per_token;
    j["peak_tflops"] = peak > 0 ? nlohmann::json(peak) : nlohmann::json(nullptr);
    j["steps"] = o.steps;
    for (int m = 0; m < 3; ++m) {
      const Summary t = Summarize(ms[m]);
      j[OffloadDeviceName(modes[m])] = {{"step_ms", t.median}, {"step_ms_min", t.min}, {"step_ms_max", t.max},
                                        {"tokens_per_s", tokens / (t.median / 1e3)},
                                        {"tflops", tflops(t.median)},
                                        {"mfu", peak > 0 ? nlohmann::json(tflops(t.median) / peak) : nlohmann::json(nullptr)},
                                        {"exposed_ms", Summarize(wait[m]).median},
                                        {"nvme_mb_per_step", Summarize(nvme[m]).median},
                                        {"ratio_vs_none", t.median / anchor.median}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("bench step: %s, %lld tokens per step, 1 rank, ZeRO stage %d, %s compute on %s; %d steps per mode, "
              "interleaved\n", base->model.arch == model::Arch::kGpt2 ? "GPT-2" : "LLaMA", (long long)tokens,
              base->zero_stage, DTypeName(base->compute_dtype), devices[0].device->device().str().c_str(), o.steps);
  Table t({"offload", "step ms", "tokens/s", "TFLOPS", "MFU", "exposed ms", "nvme MB/step", "time / none"});
  for (int m = 0; m < 3; ++m) {
    const Summary s = Summarize(ms[m]);
    t.Row({OffloadDeviceName(modes[m]), Format(s, 1), fmt::format("{:.0f}", tokens / (s.median / 1e3)),
           fmt::format("{:.3f}", tflops(s.median)),
           peak > 0 ? fmt::format("{:.1f}%", 100 * tflops(s.median) / peak) : std::string("-"),
           fmt::format("{:.2f}", Summarize(wait[m]).median), fmt::format("{:.1f}", Summarize(nvme[m]).median),
           fmt::format("{:.2f}", s.median / anchor.median)});
  }
  t.Print(stdout);
  std::printf("median (min-max); exposed = time the compute thread waited for transfers; TFLOPS = model FLOPs "
              "(%.3g per token) / step time; MFU against %s\n", flops_per_token,
              peak > 0 ? fmt::format("{:.1f} TFLOPS dense {} ({})", peak, DTypeName(base->compute_dtype),
                                     devices[0].device->Name()).c_str()
                       : "no stated peak (the host; pass --peak-tflops)");
  return 0;
}

}  // namespace strata::bench
