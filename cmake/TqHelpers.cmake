# Helpers that keep every directory's CMakeLists.txt short and uniform.
#
#   tq_library(NAME SRCS a.cc b.cc DEPS tq_common yaml-cpp [PRIVATE_DEPS ...])
#       A static library whose include root is the repository root, so code includes
#       "common/status.h", "tc/plan.h", ...
#   tq_test(NAME SRCS x_test.cc DEPS lib... [LABELS privileged;slow] [TIMEOUT seconds] [SERIAL])
#       A GoogleTest executable registered with ctest (one ctest test per TEST()).
#       Label `privileged` marks tests that need root and create network namespaces.
#       SERIAL: ctest runs these alone (RUN_SERIAL), e.g. throughput measurements that other
#       tests' CPU load would disturb.
#   tq_verbs_test(NAME SRCS x_test.cc DEPS lib... [TIMEOUT seconds])
#       A GoogleTest executable that needs RDMA devices (rxe0/rxe1 of the Soft-RoCE VM). It is
#       built like any test but NOT registered with the host's ctest (the host has no RDMA):
#       tests/rxe/ collects every verbs test into a separate ctest tree (label `verbs`) that the
#       ctest test `rxe_verbs_suite` (label `rxe`) runs inside one VM. Build for baseline x86-64:
#       the VM's CPU model (qemu64) has no SSE4/AVX.
#   tq_verbs_command(NAME COMMAND prog args... [ENVIRONMENT VAR=value...] [TIMEOUT seconds])
#       Any command (generator expressions allowed) added to the same in-VM ctest tree, e.g. a
#       non-gtest program run with RDMA-specific settings. Tests run in declaration order.

set(TQ_WARNINGS -Wall -Wextra -Wno-missing-field-initializers)
if(TQ_WERROR)
  list(APPEND TQ_WARNINGS -Werror)
endif()
if(TQ_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

function(tq_apply_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TQ_WARNINGS}>
                                           $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra $<$<BOOL:${TQ_WERROR}>:-Werror>>)
endfunction()

function(tq_library name)
  cmake_parse_arguments(A "" "" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SRCS})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${name} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
  tq_apply_warnings(${name})
endfunction()

function(tq_executable name)
  cmake_parse_arguments(A "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${A_SRCS})
  target_link_libraries(${name} PRIVATE ${A_DEPS})
  tq_apply_warnings(${name})
endfunction()

include(GoogleTest)
function(tq_test name)
  cmake_parse_arguments(A "SERIAL" "TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${A_SRCS})
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  tq_apply_warnings(${name})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 120)
  endif()
  set(labels unit)
  if(A_LABELS)
    set(labels ${A_LABELS})
  endif()
  set(serial FALSE)
  if(A_SERIAL)
    set(serial TRUE)
  endif()
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${labels}" TIMEOUT ${A_TIMEOUT} RUN_SERIAL ${serial})
endfunction()

function(tq_verbs_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${A_SRCS})
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  tq_apply_warnings(${name})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  set_property(GLOBAL APPEND PROPERTY TQ_VERBS_TESTS "${name}")
  set_property(GLOBAL PROPERTY TQ_VERBS_${name}_COMMAND "$<TARGET_FILE:${name}>")
  set_property(GLOBAL PROPERTY TQ_VERBS_${name}_ENV "")
  set_property(GLOBAL PROPERTY TQ_VERBS_${name}_TIMEOUT "${A_TIMEOUT}")
endfunction()

function(tq_verbs_command name)
  cmake_parse_arguments(A "" "TIMEOUT" "COMMAND;ENVIRONMENT" ${ARGN})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  set_property(GLOBAL APPEND PROPERTY TQ_VERBS_TESTS "${name}")
  set_property(GLOBAL PROPERTY TQ_VERBS_${name}_COMMAND "${A_COMMAND}")
  set_property(GLOBAL PROPERTY TQ_VERBS_${name}_ENV "${A_ENVIRONMENT}")
  set_property(GLOBAL PROPERTY TQ_VERBS_${name}_TIMEOUT "${A_TIMEOUT}")
endfunction()
