// Whether this test binary runs under a sanitizer (cmake/sanitize.cmake), and how much slower that
// makes it: deadlines that only catch hangs scale with it, so they do not fire on slow work.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KESTREL_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KESTREL_TEST_SANITIZED 1
#endif
#endif

namespace kestrel::testing {

#ifdef KESTREL_TEST_SANITIZED
inline constexpr int kSanitizerSlowdown = 5;  // ASan ~2x, TSan 5-15x, on a busy 2-core machine
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif

}  // namespace kestrel::testing
