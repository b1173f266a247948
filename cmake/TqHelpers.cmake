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

set(TQ_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
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
