# Debian packages (CPack DEB) for bare metal: `cpack -G DEB` in the build directory, after a
# build. Three packages from the install() components next to each target:
#   tenantqos-plugin   the NCCL plugin only: /usr/lib/tenantqos/libnccl-net-tenantqos.so
#   tenantqos-agent    /usr/bin/tenantqos-agent + its systemd unit; creates the group tenantqos
#   tenantqos-policyd  /usr/bin/tenantqos-policyd, /usr/bin/tenantqosctl + policyd's unit
# The components webhook and perf are for the container image (cmake --install, Containerfile)
# and are not packaged. tests/unit/deploy/package_test.py builds and checks the packages.
set(TQ_SYSTEMD_DIR ${PROJECT_SOURCE_DIR}/deploy/systemd)
install(FILES ${TQ_SYSTEMD_DIR}/tenantqos-agent.service
        DESTINATION lib/systemd/system COMPONENT agent-systemd)
install(FILES ${TQ_SYSTEMD_DIR}/tenantqos-policyd.service
        DESTINATION lib/systemd/system COMPONENT policyd-systemd)

# dpkg wants the maintainer script named exactly `postinst`: one directory per package.
configure_file(${TQ_SYSTEMD_DIR}/tenantqos-agent.postinst ${PROJECT_BINARY_DIR}/deb/agent/postinst
               COPYONLY)
configure_file(${TQ_SYSTEMD_DIR}/daemon-reload.postinst ${PROJECT_BINARY_DIR}/deb/policyd/postinst
               COPYONLY)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tenantqos)
set(CPACK_PACKAGE_VENDOR tenantqos)
set(CPACK_PACKAGE_CONTACT "tenantqos maintainers <tenantqos@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ONE_PER_GROUP)
set(CPACK_COMPONENTS_ALL plugin agent agent-systemd policyd policyd-systemd)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # Depends: from dpkg-shlibdeps on the binaries
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_PLUGIN_PACKAGE_NAME tenantqos-plugin)
set(CPACK_COMPONENT_PLUGIN_GROUP plugin)
set(CPACK_COMPONENT_GROUP_PLUGIN_DESCRIPTION
    "tenantqos NCCL net plugin\n The NCCL plugin (NCCL_NET_PLUGIN=tenantqos) that paces each tenant's\n traffic through its node agent's shared token bucket.")

set(CPACK_DEBIAN_AGENT_PACKAGE_NAME tenantqos-agent)
set(CPACK_COMPONENT_AGENT_GROUP agent)
set(CPACK_COMPONENT_AGENT-SYSTEMD_GROUP agent)
set(CPACK_COMPONENT_GROUP_AGENT_DESCRIPTION
    "tenantqos node agent\n Enforces the tenantqos policy on a node: tc HTB classes, per-tenant shared\n memory for the NCCL plugin, work-conserving allocation, Prometheus metrics.")
set(CPACK_DEBIAN_AGENT_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/deb/agent/postinst)
set(CPACK_DEBIAN_AGENT_PACKAGE_RECOMMENDS iproute2)

set(CPACK_DEBIAN_POLICYD_PACKAGE_NAME tenantqos-policyd)
set(CPACK_COMPONENT_POLICYD_GROUP policyd)
set(CPACK_COMPONENT_POLICYD-SYSTEMD_GROUP policyd)
set(CPACK_COMPONENT_GROUP_POLICYD_DESCRIPTION
    "tenantqos policy service and CLI\n tenantqos-policyd stores versioned tenant policies and streams them to the\n node agents; tenantqosctl applies, inspects and renders them.")
set(CPACK_DEBIAN_POLICYD_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/deb/policyd/postinst)

include(CPack)
