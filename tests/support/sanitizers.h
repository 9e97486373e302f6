// How much slower this test binary runs under a sanitizer (cmake/sanitize.cmake): deadlines and
// timeouts that only catch hangs scale with it, so they do not fire on slow work. Measured on a
// busy 2-core machine: ASan a few times slower, TSan ten times and more (and slower to start).
#pragma once

#if defined(__SANITIZE_THREAD__)
#define KESTREL_TEST_SANITIZER_SLOWDOWN 15
#elif defined(__SANITIZE_ADDRESS__)
#define KESTREL_TEST_SANITIZER_SLOWDOWN 5
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KESTREL_TEST_SANITIZER_SLOWDOWN 15
#elif __has_feature(address_sanitizer)
#define KESTREL_TEST_SANITIZER_SLOWDOWN 5
#endif
#endif
#ifndef KESTREL_TEST_SANITIZER_SLOWDOWN
#define KESTREL_TEST_SANITIZER_SLOWDOWN 1
#endif

namespace kestrel::testing {

inline constexpr int kSanitizerSlowdown = KESTREL_TEST_SANITIZER_SLOWDOWN;

}  // namespace kestrel::testing
