# Third-party packages, all from Debian 12 (scripts/install-deps.sh installs them).
# Pitfalls handled here (see docs/development.md): Debian ships no gRPC::grpc_cpp_plugin
# target and no protobuf-config.cmake, so protoc's plugin is found with find_program and
# Protobuf through CMake's FindProtobuf module.
find_package(Threads REQUIRED)
if(TQ_PLUGIN_ONLY)
  # The plugin alone: nothing but the compiler's own. Without the verbs headers the plugin is
  # built without its ib transport (nccl-plugin/ib/ib_factory.h), socket only.
  find_path(TQ_IBVERBS_INCLUDE_DIR infiniband/verbs.h)
  return()
endif()
find_package(PkgConfig REQUIRED)
find_package(GTest REQUIRED)

find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)             # rpc/: reads the peer certificate's subject
find_program(TQ_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json REQUIRED)       # JSON for the admission webhook (header-only)
find_package(OpenSSL REQUIRED)             # the webhook's HTTPS server            # target: yaml-cpp (0.7 has no namespaced alias)
pkg_check_modules(NL REQUIRED IMPORTED_TARGET libnl-3.0 libnl-route-3.0)
# libyaml (libyaml-dev): the policy file's parser (policy/yaml_doc.h); yaml-cpp reads the
# importers' Kubernetes objects.
pkg_check_modules(LIBYAML REQUIRED IMPORTED_TARGET yaml-0.1)
# zlib (zlib1g-dev; gRPC links it already): deflated policy snapshots (proto/snapshot_codec.h).
find_package(ZLIB REQUIRED)
# libibverbs: headers only (libibverbs-dev). The library is dlopen'ed at run time by ib/verbs.cc
# and must never be linked (the plugin has to load on hosts without it).
find_path(TQ_IBVERBS_INCLUDE_DIR infiniband/verbs.h REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
if(TQ_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
