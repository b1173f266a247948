// common/bad.h exists, but the target below is not named after the path.
