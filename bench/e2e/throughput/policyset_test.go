package throughput

import (
	"strconv"
	"strings"
)

// placementSummary counts the realistic set's bound pods (pod name to
// node name, pods made by policyset.RealisticPod) per pool, and those on a pool the deny placement templates
// forbid them: any pod on a tenant pool (the runs' namespaces belong to no
// tenant), a node-agent (host network) off the system pool.
func placementSummary(bound map[string]string) (perPool map[string]int, forbidden int) {
	perPool = map[string]int{}
	for pod, node := range bound {
		pl := node
		if i := strings.LastIndexByte(node, '-'); i > 0 {
			pl = node[:i]
		}
		perPool[pl]++
		idx, err := strconv.Atoi(strings.TrimPrefix(pod, "p-"))
		agent := err == nil && idx%8 == 7
		switch {
		case pl == "alpha" || pl == "beta" || pl == "alpha-spot":
			forbidden++
		case agent && pl != "system":
			forbidden++
		}
	}
	return perPool, forbidden
}
