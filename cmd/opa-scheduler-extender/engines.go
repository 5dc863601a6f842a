package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// engineFlags are Gatekeeper's flags that choose the engine a template
// runs on, with Gatekeeper's names and defaults; serve, verify, test and
// explain share them so that each judges as the service does.
type engineFlags struct {
	k8sNativeValidation  bool
	defaultFailurePolicy string
}

func (f *engineFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&f.k8sNativeValidation, "enable-k8s-native-validation", true, "run a template's CEL code when it has some, as Gatekeeper does; false: Rego only")
	fs.StringVar(&f.defaultFailurePolicy, "default-k8s-native-validation-failure-policy", "Fail", "failure policy of K8sNativeValidation code that names none: Fail (an evaluation error denies) or Ignore")
}

// apply sets the choices in opts, or says why they are not valid.
func (f *engineFlags) apply(opts *opa.Options) error {
	if p := f.defaultFailurePolicy; p != "Fail" && p != "Ignore" {
		return fmt.Errorf("--default-k8s-native-validation-failure-policy=%q: want Fail or Ignore", p)
	}
	opts.DisableK8sNativeValidation = !f.k8sNativeValidation
	opts.DefaultK8sNativeValidationFailurePolicy = f.defaultFailurePolicy
	return nil
}
