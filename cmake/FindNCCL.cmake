# Finds NCCL in the CUDA toolkit (or NCCL_ROOT). Defines NCCL::nccl.
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_ROOT
  PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl
  HINTS ${NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_ROOT
  PATH_SUFFIXES lib64 lib)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
