// A lower library including a higher one: the layering check must reject it.
#pragma once
#include "agent/agent.h"
