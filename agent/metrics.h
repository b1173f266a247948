// Prometheus exposition of the agent: built from a published AgentState (never from the
// reconcile thread's own state) with prometheus-cpp's MetricFamily + TextSerializer.
// Names carry units; see docs/agent.md for the table.
#pragma once

#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "agent/agent_state.h"

namespace tq::agent {

inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

std::vector<prometheus::MetricFamily> metricFamilies(const AgentState& state,
                                                     const WatchStatus& watch);
// The text exposition (format 0.0.4).
std::string renderMetrics(const AgentState& state, const WatchStatus& watch);

}  // namespace tq::agent
