#include "webhook/webhook.h"

int main(int argc, char** argv) { return tq::webhook::webhookMain(argc, argv); }
