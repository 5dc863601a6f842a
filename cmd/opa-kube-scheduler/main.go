// Command opa-kube-scheduler is kube-scheduler v1.37 with the OPAGatekeeper
// plugin registered: the same Gatekeeper policies as the extender, judged
// in the scheduler's own process at PreFilter, Filter, PreScore and Score,
// with no HTTP hop. It takes every kube-scheduler flag; enable the plugin
// in a profile of its KubeSchedulerConfiguration (deploy/plugin).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/cmd/opa-kube-scheduler/gatekeeper"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(gatekeeper.Name, gatekeeper.New))
	os.Exit(cli.Run(command))
}
