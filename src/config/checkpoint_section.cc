// The checkpoint section (checkpoint_section.h).
#include "src/config/checkpoint_section.h"

namespace strata {

Status ParseCheckpointSection(JsonReader& root, TrainConfig* c) {
  if (!root.Has("checkpoint")) return Status();
  STRATA_ASSIGN_OR_RETURN(JsonReader s, root.Child("checkpoint"));
  STRATA_RETURN_IF_ERROR(s.Bool("use_node_local_storage", &c->node_local_checkpoints));
  s.UnusedKeys(&c->warnings);
  return Status();
}

}  // namespace strata
