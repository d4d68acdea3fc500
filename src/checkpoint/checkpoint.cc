#include "src/checkpoint/checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "src/base/temporaries.h"
#include "src/base/durable_file.h"
#include "src/checkpoint/manifest.h"
#include "src/checkpoint/reshard.h"
#include "src/checkpoint/safetensors.h"
#include "src/config/json_reader.h"
#include "strata/flat_group.h"
#include "src/comm/float_pieces.h"
#include "strata/log.h"

namespace strata::ckpt {
namespace fs = std::filesystem;
namespace {

const char* SafetensorsDType(DType d) { return d == DType::kF32 ? "F32" : d == DType::kBF16 ? "BF16" : "F16"; }

// Every rank learns whether any rank failed a phase, so none waits for a peer that gave up.
Status Agree(Communicator& comm, const Status& mine, const char* phase) {
  float bad = mine.ok() ? 0.f : 1.f;
  if (comm.world_size() > 1) STRATA_RETURN_IF_ERROR(comm.AllReduce(&bad, 1, DType::kF32, ReduceOp::kSum));
  if (!mine.ok()) return mine.WithContext(phase);
  if (bad > 0) return Error(StatusCode::kFailedPrecondition, "{}: another rank failed (see its error)", phase);
  return Status();
}

Status RemoveAll(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return Error(StatusCode::kIoError, "cannot remove '{}': {}", path, ec.message());
  return Status();
}

// Streams this rank's state into `path`: the header's room is reserved first (its size is
// bounded by the tensor count), the data follows in VisitState order, and the header is
// written last into its room, padded with spaces (valid JSON whitespace).
Status WriteShard(Engine& engine, const TrainConfig& cfg, const std::string& path, const SaveOptions& opt,
                  nlohmann::json* sum) {
  // Room for the header: each entry is a name and three short fields (< 192 bytes).
  const uint64_t room = static_cast<uint64_t>(engine.plan().NumKeys()) * 192 + 4096;
  STRATA_ASSIGN_OR_RETURN(DurableWriter w, DurableWriter::Create(path));
  std::string blank(8 + room, ' ');
  STRATA_RETURN_IF_ERROR(w.Write(std::as_bytes(std::span(blank.data(), blank.size()))));
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "strata-shard"}};
  uint64_t offset = 0;
  int64_t count = 0;
  STRATA_RETURN_IF_ERROR(engine.VisitState([&](const TensorKey& key, std::span<const std::byte> bytes) -> Status {
    const std::string name = key.Name();
    const char* dtype = SafetensorsDType(engine.plan().format.VisitedDType(key.role));
    const int64_t numel = static_cast<int64_t>(bytes.size()) / SafetensorsDTypeSize(dtype);
    header[name] = {{"dtype", dtype},
                    {"shape", nlohmann::json::array({numel})},
                    {"data_offsets", nlohmann::json::array({offset, offset + bytes.size()})}};
    offset += bytes.size();
    STRATA_RETURN_IF_ERROR(w.Write(bytes));
    if (++count == 1 && opt.crash_hook) opt.crash_hook("shard_partly_written");
    return Status();
  }));
  std::string text = header.dump();
  if (text.size() > room)
    return Error(StatusCode::kInternal, "'{}': header of {} bytes exceeds its reserved {}", path, text.size(), room);
  text.append(room - text.size(), ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(room >> (8 * i));
  STRATA_RETURN_IF_ERROR(w.PWrite(0, std::as_bytes(std::span(len))));
  STRATA_RETURN_IF_ERROR(w.PWrite(8, std::as_bytes(std::span(text.data(), text.size()))));
  STRATA_RETURN_IF_ERROR(w.Close());
  STRATA_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(path));  // the checksum covers the final bytes
  *sum = {{"name", fs::path(path).filename().string()}, {"bytes", m.bytes().size()},
          {"xxh3", HexU64(Xxh3(m.bytes()))}, {"tensors", count}};
  return Status();
}

nlohmann::json Layout(const Engine& e) {
  nlohmann::json out = nlohmann::json::array();
  for (int b = 0; b < e.num_blocks(); ++b) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& p : e.BlockParams(b)) {
      params.push_back({{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}});
      if (p.nf4) params.back()["nf4_stored"] = p.stored;  // a blob of that many elements
    }
    out.push_back({{"block", b}, {"padded", e.plan().blocks[b].layout.padded}, {"params", params}});
  }
  return out;
}

Status RestoreCounters(Engine& engine, const nlohmann::json& c, const std::string& step_dir) {
  EngineCounters counters{c.at("adam_steps").get<int64_t>(), c.at("loss_scale").get<double>(),
                          c.at("clean_steps").get<int64_t>(), c.at("hysteresis_left").get<int>(), {}};
  // (absent before mixtures of experts skipped unchosen experts: each took every step)
  if (c.contains("expert_steps")) counters.expert_steps = c["expert_steps"].get<std::vector<std::vector<int64_t>>>();
  if (!engine.ExpertStepsFit(counters.expert_steps))
    return Error(StatusCode::kFailedPrecondition, "'{}': counters.expert_steps does not have this model's experts",
                 step_dir);
  engine.set_counters(counters);
  return Status();
}

// Rank 0's part of the commit: manifest, rename, `latest`, pruning.
// Node-local folders: every rank's sum (rank<r>.sum's fields) over the ranks.
StatusOr<nlohmann::json> GatherSums(Communicator& comm, const nlohmann::json& sum) {
  constexpr int kPieces = 3 * kFloatPieces;  // bytes, xxh3, tensors
  const uint64_t mine[3] = {sum["bytes"].get<uint64_t>(), std::stoull(sum["xxh3"].get<std::string>(), nullptr, 16),
                            sum["tensors"].get<uint64_t>()};
  std::vector<float> shard(kPieces), all(static_cast<size_t>(kPieces) * comm.world_size());
  for (int k = 0; k < 3; ++k) ToFloatPieces(mine[k], &shard[k * kFloatPieces]);
  STRATA_RETURN_IF_ERROR(comm.AllGather(shard.data(), all.data(), kPieces, DType::kF32));
  nlohmann::json files = nlohmann::json::array();
  for (int r = 0; r < comm.world_size(); ++r) {
    const float* theirs = &all[static_cast<size_t>(r) * kPieces];
    files.push_back({{"name", RankFileName(r)}, {"bytes", FromFloatPieces(theirs)},
                     {"xxh3", HexU64(FromFloatPieces(theirs + kFloatPieces))},
                     {"tensors", FromFloatPieces(theirs + 2 * kFloatPieces)}});
  }
  return files;
}

// `gathered`: every rank's sum, where the folder holds only some of them (node-local folders).
Status Commit(Engine& engine, const TrainConfig& cfg, const std::string& dir, const std::string& tmp, int64_t step,
              int world, const SaveOptions& opt, const nlohmann::json* gathered) {
  nlohmann::json files = gathered ? *gathered : nlohmann::json::array();
  for (int r = 0; !gathered && r < world; ++r) {
    const std::string sum_path = (fs::path(tmp) / fmt::format("rank{}.sum", r)).string();
    STRATA_ASSIGN_OR_RETURN(std::string text, ReadTextFile(sum_path));
    STRATA_ASSIGN_OR_RETURN(nlohmann::json sum, ParseJsonText(text, "'" + sum_path + "'", StatusCode::kDataLoss));
    files.push_back(std::move(sum));
  }
  const EngineCounters c = engine.counters();
  nlohmann::json manifest = {
      {"format", kManifestFormat},
      {"step", step},
      {"world_size", world},
      {"compute_dtype", DTypeName(cfg.compute_dtype)},
      // Whose states the moment slots hold ("adam", "lion", "adagrad", "lamb", "muon"; Note [Optimizer rules]).
      {"optimizer", engine.plan().format.rule().name},
      {"adam_states", DTypeName(engine.plan().format.VisitedMomentDType())},
      // How the run kept m and v ("8bit" is saved as its fp32 values: adam_states "fp32").
      {"run_adam_states", engine.plan().format.MomentsName()},
      {"seed", cfg.seed},
      {"sub_group_size", cfg.sub_group_size},
      {"zero_stage", cfg.zero_stage},
      {"model", ModelConfigJson(cfg.model)},
      // The Hugging Face folder export copies tokenizer files from (absolute: export may run elsewhere).
      {"hf_source", cfg.model_from.empty() ? std::string() : fs::absolute(cfg.model_from).string()},
      {"counters",
       {{"adam_steps", c.adam_steps}, {"loss_scale", c.loss_scale}, {"clean_steps", c.clean_steps},
        {"hysteresis_left", c.hysteresis_left}}},
      {"data_position", {{"next_step", step}, {"note", "batches are a pure function of (seed, step)"}}},
      {"layout", Layout(engine)},
      {"files", files}};
  if (!c.expert_steps.empty()) manifest["counters"]["expert_steps"] = c.expert_steps;
  for (const auto& [name, bytes] : opt.side_files)
    STRATA_RETURN_IF_ERROR(WriteDurably((fs::path(tmp) / name).string(), bytes));
  STRATA_RETURN_IF_ERROR(WriteFileAtomically((fs::path(tmp) / "manifest.json").string(), manifest.dump(1)));
  for (int r = 0; r < world; ++r) {  // their content is in the manifest now
    std::error_code ec;
    fs::remove(fs::path(tmp) / fmt::format("rank{}.sum", r), ec);
  }
  STRATA_RETURN_IF_ERROR(FsyncDir(tmp));
  if (opt.crash_hook) opt.crash_hook("before_rename");
  const std::string final_dir = (fs::path(dir) / StepDirName(step)).string();
  STRATA_RETURN_IF_ERROR(RemoveAll(final_dir));  // a re-save of the same step replaces it
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) return ErrnoError(errno, "rename '{}' to '{}'", tmp, final_dir);
  STRATA_RETURN_IF_ERROR(FsyncDir(dir));
  if (opt.crash_hook) opt.crash_hook("before_latest");
  STRATA_RETURN_IF_ERROR(WriteFileAtomically((fs::path(dir) / "latest").string(), StepDirName(step) + "\n"));
  for (const std::string& earlier : opt.replaces)  // another run's, replaced (train --overwrite)
    if (fs::path(earlier).filename() != fs::path(final_dir).filename()) {
      STRATA_RETURN_IF_ERROR(RemoveAll(earlier));
      LogInfo("removed '{}', which another run had left in '{}' (--overwrite)", earlier, dir);
    }
  if (opt.keep > 0) {
    auto steps = ListSteps(dir);
    for (size_t i = 0; i + opt.keep < steps.size(); ++i)
      if (steps[i].first != step) STRATA_RETURN_IF_ERROR(RemoveAll(steps[i].second));
  }
  return Status();
}

}  // namespace

nlohmann::json ModelConfigJson(const model::ModelConfig& m) { return strata::ModelConfigJson(m); }

StatusOr<std::vector<std::string>> CheckSaveFolder(const std::string& save, const std::string& resume,
                                                   bool overwrite) {
  std::error_code ec;
  const auto steps = ListSteps(save);
  if (steps.empty() && !fs::exists(fs::path(save) / "latest", ec)) return std::vector<std::string>{};
  if (!resume.empty()) {  // resuming from this very folder (or one of its steps) goes on saving there
    const fs::path r = fs::weakly_canonical(fs::absolute(resume), ec);
    const fs::path root = fs::exists(r / "manifest.json", ec) ? r.parent_path() : r;
    if (root == fs::weakly_canonical(fs::absolute(save), ec)) return std::vector<std::string>{};
  }
  if (overwrite) {  // every step folder there, complete or not ("step_N.tmp" of a crashed save)
    std::vector<std::string> replaced;
    for (const auto& e : fs::directory_iterator(save, ec))
      if (e.path().filename().string().starts_with("step_") && e.is_directory(ec)) replaced.push_back(e.path().string());
    std::sort(replaced.begin(), replaced.end());
    return replaced;
  }
  const std::string newest = steps.empty() ? "a 'latest' file" : fs::path(steps.back().second).filename().string();
  return Error(StatusCode::kAlreadyExists,
               "--save '{}' holds the checkpoints of another run ({} step folder(s), the newest {}): this run would "
               "prune or overwrite them. Continue that run with --resume {}, give this run its own --save folder, or "
               "pass --overwrite to replace them", save, steps.size(), newest, save);
}

Status SaveCheckpoint(Engine& engine, Communicator& comm, const TrainConfig& cfg, const std::string& dir, int64_t step,
                      const SaveOptions& opt) {
  const int rank = comm.rank(), world = comm.world_size();
  const bool lead = opt.folders > 1 ? opt.folder_lead : rank == 0;  // of this rank's folder
  const std::string tmp = (fs::path(dir) / (StepDirName(step) + ".tmp")).string();
  Status s;
  if (lead) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) s = Error(StatusCode::kIoError, "cannot create checkpoint folder '{}': {}", dir, ec.message());
    if (s.ok()) s = RemoveAll(tmp);  // a crashed earlier save of this step
    if (s.ok()) {
      RegisterTemporary(tmp);  // a stop (any stop signal) mid-save removes it
      const auto hold = HoldOffStops();
      if (!fs::create_directory(tmp, ec)) s = Error(StatusCode::kIoError, "cannot create '{}': {}", tmp, ec.message());
    }
  }
  STRATA_RETURN_IF_ERROR(Agree(comm, s, "checkpoint: preparing the folder"));

  nlohmann::json sum;
  s = WriteShard(engine, cfg, (fs::path(tmp) / RankFileName(rank)).string(), opt, &sum);
  if (s.ok()) s = WriteFileAtomically((fs::path(tmp) / fmt::format("rank{}.sum", rank)).string(), sum.dump());
  s = Agree(comm, s, fmt::format("checkpoint: writing rank {}'s shard", rank).c_str());
  if (s.ok()) {
    StatusOr<nlohmann::json> gathered = opt.folders > 1 ? GatherSums(comm, sum) : StatusOr<nlohmann::json>(nullptr);
    if (!gathered.ok()) s = gathered.status();
    if (s.ok() && lead) s = Commit(engine, cfg, dir, tmp, step, world, opt, opt.folders > 1 ? &*gathered : nullptr);
    s = Agree(comm, s, "checkpoint: committing");
  }
  // A failed save (a full disk, an I/O error) can never become valid: its folder goes, so the
  // space comes back; the checkpoints before it and `latest` were never touched.
  if (!s.ok() && lead && RemoveAll(tmp).ok())
    s = Status(s.code(), fmt::format("{} (the incomplete '{}' was removed; earlier checkpoints in '{}' are intact)",
                                     s.message(), tmp, dir));
  if (lead) ForgetTemporary(tmp);  // renamed into place, or removed
  return s;
}

namespace {

// Node-local folders: the step folder every rank resumes from, the newest that every folder
// holds. A save cut short between two nodes' commits leaves one node's `latest` a step ahead;
// the step before is still there (strata.keep_checkpoints keeps two), so every rank takes that.
// A rank that cannot resolve `path` keeps it, and its error is the resume's. Collective.
StatusOr<std::string> AgreedStepDir(Communicator& comm, const std::string& path) {
  const StatusOr<std::string> mine = ResolveStepDir(path);
  int64_t step = -1;
  if (mine.ok()) {
    const std::string name = fs::path(*mine).filename().string();  // "step_00000040"
    if (name.starts_with("step_") && name.size() > 5 && name.find_first_not_of("0123456789", 5) == std::string::npos)
      step = std::stoll(name.substr(5));
  }
  if (step >= (int64_t{1} << 24))  // (a float holds the steps exactly below this)
    return Error(StatusCode::kInvalidArgument, "node-local checkpoints agree on steps below 16777216, not {}", step);
  float lowest = -static_cast<float>(step), highest = static_cast<float>(step);
  STRATA_RETURN_IF_ERROR(comm.AllReduce(&lowest, 1, DType::kF32, ReduceOp::kMax));
  STRATA_RETURN_IF_ERROR(comm.AllReduce(&highest, 1, DType::kF32, ReduceOp::kMax));
  const auto newest_everywhere = static_cast<int64_t>(-lowest);
  if (!mine.ok() || newest_everywhere < 0 || newest_everywhere == static_cast<int64_t>(highest)) return path;
  if (comm.rank() == 0)
    LogWarn("'{}': the node-local folders' newest checkpoints differ (steps {} to {}: a save was cut short on some "
            "node); every rank resumes from step {}", path, newest_everywhere, static_cast<int64_t>(highest),
            newest_everywhere);
  return (fs::path(*mine).parent_path() / StepDirName(newest_everywhere)).string();
}

// RestoreResharded, saying what a node-local checkpoint needs for it.
Status Reshard(Engine& engine, const TrainConfig& cfg, const nlohmann::json& m, const std::string& step_dir) {
  const Status r = RestoreResharded(engine, cfg, m, step_dir);
  if (r.ok() || !cfg.node_local_checkpoints) return r;
  return r.WithContext("resharding a node-local checkpoint reads every rank's file: put the rank files of this step "
                       "from every node's folder into one step folder and resume from it");
}

}  // namespace

StatusOr<int64_t> LoadCheckpoint(Engine& engine, Communicator& comm, const TrainConfig& cfg,
                                 const std::string& given) {
  int64_t step = 0;
  std::string path = given;
  if (cfg.node_local_checkpoints && comm.world_size() > 1) {
    STRATA_ASSIGN_OR_RETURN(path, AgreedStepDir(comm, given));
  }
  auto load = [&]() -> Status {
    STRATA_ASSIGN_OR_RETURN(std::string step_dir, ResolveStepDir(path));
    STRATA_ASSIGN_OR_RETURN(nlohmann::json m, ReadManifest(step_dir));
    const std::string where = (fs::path(step_dir) / "manifest.json").string();
    if (m["compute_dtype"] != DTypeName(cfg.compute_dtype))
      return Error(StatusCode::kFailedPrecondition, "'{}' was saved with compute dtype {}; this run uses {}", where,
                   m["compute_dtype"].dump(), DTypeName(cfg.compute_dtype));
    // Checkpoints from before strata.adam_states hold fp32 moments, from before optimizer.type Adam's.
    const StateFormat& format = engine.plan().format;
    if (const std::string saved = m.value("optimizer", std::string("adam")); saved != format.rule().name)
      return Error(StatusCode::kFailedPrecondition, "'{}' holds the states of {}; this run's optimizer.type is {} (the "
                   "states do not carry over: resume with optimizer.type {})", where, RuleNamed(saved)->title,
                   format.rule().title, RuleNamed(saved)->title);
    STRATA_RETURN_IF_ERROR(format.CheckResume(m.value("adam_states", std::string("fp32")), where));
    // Compared with every default spelled out: ffn_hidden 0 and its value are one model.
    StatusOr<model::ModelConfig> saved_model = ParseModelConfigJson(m["model"], "'" + where + "'");
    if (!saved_model.ok()) return Status(StatusCode::kDataLoss, saved_model.status().message());
    const nlohmann::json model = ModelConfigJson(model::Canonical(cfg.model)),
                         saved = ModelConfigJson(model::Canonical(*saved_model));
    // Both ways: keys written only when not default (head_dim, qk_norm, ...) may be on either side.
    for (const nlohmann::json* side : {&model, &saved})
      for (auto it = side->begin(); it != side->end(); ++it)
        if (saved.value(it.key(), nlohmann::json()) != model.value(it.key(), nlohmann::json()))
          return Error(StatusCode::kFailedPrecondition, "'{}': strata.model.{} is {} there, {} in this run", where,
                       it.key(), saved.value(it.key(), nlohmann::json()).dump(),
                       model.value(it.key(), nlohmann::json()).dump());
    // Switching between 8-bit and fp32 moments is allowed; say so, since the run changes.
    if (const std::string note = format.ResumeNote(m.value("run_adam_states", std::string()));
        comm.rank() == 0 && !note.empty())
      LogInfo("'{}' {}", where, note);
    if (m.value("seed", cfg.seed) != cfg.seed)
      LogWarn("resuming '{}' (seed {}) with seed {}: the data order after the checkpoint differs from the original run",
              step_dir, m["seed"].dump(), cfg.seed);
    if (NeedsResharding(m, cfg, comm.world_size())) {
      if (comm.rank() == 0)
        LogInfo("resharding '{}': saved by {} rank(s) at ZeRO stage {} with sub_group_size {}; this run: {} rank(s), "
                "stage {}, sub_group_size {}", step_dir, m["world_size"].dump(), m["zero_stage"].dump(),
                m["sub_group_size"].dump(), comm.world_size(), cfg.zero_stage, cfg.sub_group_size);
      STRATA_RETURN_IF_ERROR(Reshard(engine, cfg, m, step_dir));
      STRATA_RETURN_IF_ERROR(RestoreCounters(engine, m["counters"], step_dir));
      step = m["step"].get<int64_t>();
      return Status();
    }
    STRATA_ASSIGN_OR_RETURN(SafetensorsFile f, OpenRankFile(step_dir, m, comm.rank()));
    const std::string mismatch = fmt::format("'{}' does not match this run's state (different sub_group_size or "
                                             "stage?)", f.path());
    size_t restored = 0;
    for (const TensorView& t : f.tensors()) {
      const std::optional<TensorKey> key = TensorKey::Parse(t.name);
      if (!key) return Error(StatusCode::kDataLoss, "{}: tensor '{}' is not a training-state name", f.path(), t.name);
      if (Status s = engine.RestoreState(*key, t.bytes); !s.ok()) return s.WithContext(mismatch);
      ++restored;
    }
    // Every tensor of this run's state must have come from the file (names are unique).
    if (restored != engine.plan().NumKeys())
      return Error(StatusCode::kFailedPrecondition, "{}: it holds {} tensors, this run's state has {}", mismatch,
                   restored, engine.plan().NumKeys());
    STRATA_RETURN_IF_ERROR(RestoreCounters(engine, m["counters"], step_dir));
    step = m["step"].get<int64_t>();
    return Status();
  };
  Status s;
  try {
    s = load();
  } catch (const nlohmann::json::exception& e) {
    s = Error(StatusCode::kDataLoss, "checkpoint '{}': malformed manifest ({})", path, e.what());
  }
  STRATA_RETURN_IF_ERROR(Agree(comm, s, fmt::format("resuming from '{}'", path).c_str()));
  return step;
}

}  // namespace strata::ckpt
