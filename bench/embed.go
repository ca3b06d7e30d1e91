// Package bench holds the Dask yardstick that `evoq bench --vs-dask` runs
// side by side with evoq: dask_baseline.py, embedded so that the evoq
// binary can run it from any directory.
package bench

import _ "embed"

// DaskBaseline is the source of dask_baseline.py.
//
//go:embed dask_baseline.py
var DaskBaseline []byte
