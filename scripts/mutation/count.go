// Command count prints the mutant counts of a gremlins JSON result
// (gremlins unleash -o), for scripts/mutation.sh: killed, lived, not
// covered, timed out, not viable and runnable (a dry run's covered ones),
// on one line. gremlins' own summary in
// that file has no timed-out count.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

type result struct {
	Files []struct {
		Mutations []struct {
			Status string `json:"status"`
		} `json:"mutations"`
	} `json:"files"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: count gremlins-result.json")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var r result
	if err := json.Unmarshal(data, &r); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	n := map[string]int{}
	for _, f := range r.Files {
		for _, m := range f.Mutations {
			n[m.Status]++
		}
	}
	fmt.Println(n["KILLED"], n["LIVED"], n["NOT COVERED"], n["TIMED OUT"], n["NOT VIABLE"], n["RUNNABLE"])
}
