# Sanitizer and fuzzing builds (scripts/sanitize.sh runs both; give each its own build folder).
#   -DKESTREL_SANITIZE=address,undefined  AddressSanitizer + UndefinedBehaviorSanitizer; any UB
#                                         report aborts (-fno-sanitize-recover), so a test fails.
#   -DKESTREL_SANITIZE=thread             ThreadSanitizer, for the tests labelled `threads`.
#   -DKESTREL_FUZZ=ON                     clang only, with address: every C++ file is instrumented
#                                         for libFuzzer and fuzz/ builds one fuzz_<name> per target.
# Only C++ sources get the flags: nvcc compiles the .cu files (device and host code) as usual, so
# CUDA stays compiled, unsanitized; the sanitized runs exercise CPU paths only.
set(KESTREL_SANITIZE "" CACHE STRING "Sanitizers for the C++ code: address,undefined or thread")
option(KESTREL_FUZZ "Build the libFuzzer targets in fuzz/ (clang, with KESTREL_SANITIZE=address,...)" OFF)

if(KESTREL_SANITIZE)
  set(kestrel_sanitizers address undefined address,undefined thread)
  if(NOT KESTREL_SANITIZE IN_LIST kestrel_sanitizers)
    message(FATAL_ERROR "KESTREL_SANITIZE='${KESTREL_SANITIZE}': use address,undefined or thread "
                        "(ThreadSanitizer cannot be combined with AddressSanitizer)")
  endif()
  # Line tables only: reports name file and line at a fraction of full debug info's build time.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    set(kestrel_line_tables -gline-tables-only)
  else()
    set(kestrel_line_tables -g1)
  endif()
  set(kestrel_sanitize_flags -fsanitize=${KESTREL_SANITIZE} -fno-omit-frame-pointer ${kestrel_line_tables})
  if(KESTREL_SANITIZE MATCHES "undefined")
    list(APPEND kestrel_sanitize_flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${kestrel_sanitize_flags}>")
  add_link_options(${kestrel_sanitize_flags})
endif()

if(KESTREL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "KESTREL_FUZZ needs clang's libFuzzer: configure a separate build folder "
                        "with -DCMAKE_CXX_COMPILER=clang++-14 (scripts/sanitize.sh does)")
  endif()
  if(NOT KESTREL_SANITIZE MATCHES "address")
    message(FATAL_ERROR "KESTREL_FUZZ runs its targets under AddressSanitizer: add "
                        "-DKESTREL_SANITIZE=address,undefined")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>")
endif()
