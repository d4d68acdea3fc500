// The thread's armed ExpertRouting (Note [Expert-aware fetching], expert_routing.h).
#include "src/model/expert_routing.h"

namespace strata::model {
namespace {
thread_local ExpertRouting* armed_routing = nullptr;
}  // namespace

ExpertRouting* ExpertRouting::Current() { return armed_routing; }
ExpertRoutingScope::ExpertRoutingScope(ExpertRouting* routing) : previous_(armed_routing) { armed_routing = routing; }
ExpertRoutingScope::~ExpertRoutingScope() { armed_routing = previous_; }

}  // namespace strata::model
