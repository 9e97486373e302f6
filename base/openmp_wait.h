// How OpenMP's idle threads wait, set before libgomp loads.
//
// libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when the library loads, before main();
// without either, an idle worker spins 300000 rounds (about a millisecond) before sleeping. On
// a quiet machine that spin catches the next parallel region; on cores shared with other work
// (data-loader threads, other ranks, other jobs) every spinning worker takes a core from a thread
// that has work, and a yolov5s inference ran 2-3x slower at load average 5 (docs/history/performance.md).
// Kestrel's programs therefore start with a shorter spin (kSpinCount rounds, then sleep) unless
// the user chose a policy: settle_openmp_wait() sets GOMP_SPINCOUNT and runs the same program
// again (exec, same process id and arguments), once.
#pragma once
#include <optional>
#include <string>

namespace kestrel {

inline constexpr const char* kSpinCount = "30000";

// The GOMP_SPINCOUNT to set, given the environment's OMP_WAIT_POLICY and GOMP_SPINCOUNT (null
// when unset): nothing when the user set either.
std::optional<std::string> openmp_spin_to_set(const char* wait_policy, const char* spin_count);

// Call first in main(), before any thread starts: when openmp_spin_to_set() asks for a value, sets
// it and execs /proc/self/exe with argv. Returns when nothing was needed, or when the exec failed
// (the program then runs on with libgomp's default, and says nothing: the setting is a speed
// preference, not a requirement).
void settle_openmp_wait(char** argv);

}  // namespace kestrel
