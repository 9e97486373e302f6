#include "engine/host_sync.h"

#include "base/error.h"

namespace kestrel {
namespace {

thread_local HostSyncGuard* t_innermost = nullptr;

}  // namespace

HostSyncGuard::HostSyncGuard(Policy policy) : policy_(policy), outer_(t_innermost) {
  t_innermost = this;
}

HostSyncGuard::~HostSyncGuard() { t_innermost = outer_; }

void note_host_sync(const char* what) {
  HostSyncGuard* guard = t_innermost;
  if (!guard) return;
  guard->sites_.emplace_back(what);
  KESTREL_CHECK(guard->policy_ == HostSyncGuard::Policy::Count, what,
                " blocks the host until the device catches up, inside a scope that must not wait "
                "for the device (HostSyncGuard); enqueue the work and read its result later");
}

}  // namespace kestrel
