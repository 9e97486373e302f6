# Finds cuDNN 9 in the CUDA toolkit (or CUDNN_ROOT). Defines CUDNN::cudnn.
find_path(CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_ROOT
  PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY cudnn
  HINTS ${CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR} ENV CUDNN_ROOT
  PATH_SUFFIXES lib64 lib)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR)
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES
    IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
