// tenantqos-policyd entry point; everything lives in policyd.cc (a library, so tests link it).
#include "policy/policyd.h"

int main(int argc, char** argv) { return tq::policy::policydMain(argc, argv); }
