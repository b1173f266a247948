// No common/orphan.cc: the layout check must reject it.
