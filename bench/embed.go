package bench

import _ "embed"

// DaskBaseline is the source of dask_baseline.py, the Dask yardstick, built
// into the package so that the evoq binary can run it from any directory.
//
//go:embed dask_baseline.py
var DaskBaseline []byte
