// tenantqosctl entry point; everything lives in ctl.cc (a library, so tests link it).
#include "policy/ctl.h"

int main(int argc, char** argv) { return tq::policy::ctlMain(argc, argv); }
