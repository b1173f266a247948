# A CMAKE_PROJECT_TOP_LEVEL_INCLUDES file (CMake >= 3.24) for the plugin-only build's rehearsal
# (rehearse.sh): find_package() of anything but the compiler's threads and the CUDA toolkit is a
# configure error, so no package creeps into TQ_PLUGIN_ONLY (NCCL is found without
# find_package, tests/gpu/CMakeLists.txt). The provider answers nothing itself: an allowed
# package is then found by CMake as usual.
macro(tq_only_compiler_cuda_nccl method name)
  if(NOT "${name}" MATCHES "^(Threads|CUDAToolkit)$")
    message(FATAL_ERROR "find_package(${name}) in the plugin-only build (TQ_PLUGIN_ONLY): it may "
                        "need nothing but a C++ compiler, CUDA and NCCL (Threads, CUDAToolkit)")
  endif()
endmacro()
cmake_language(SET_DEPENDENCY_PROVIDER tq_only_compiler_cuda_nccl SUPPORTED_METHODS FIND_PACKAGE)
