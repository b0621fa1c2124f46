package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"

	"github.com/txbox/txbox/config"
)

// TestKubernetesExample: deploy/kubernetes parses, has the ConfigMap,
// Secret and Deployment, probes /readyz and /livez on the port the
// configuration's health listener uses, and its txbox.yaml loads.
func TestKubernetesExample(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../deploy/kubernetes/txbox-relay.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
	}
	type doc struct {
		Kind string            `yaml:"kind"`
		Data map[string]string `yaml:"data"`
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Ports []struct {
							Name          string `yaml:"name"`
							ContainerPort int    `yaml:"containerPort"`
						} `yaml:"ports"`
						Readiness probe `yaml:"readinessProbe"`
						Liveness  probe `yaml:"livenessProbe"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	kinds := map[string]doc{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var d doc
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		kinds[d.Kind] = d
	}
	for _, k := range []string{"ConfigMap", "Secret", "Deployment"} {
		if _, ok := kinds[k]; !ok {
			t.Errorf("no %s", k)
		}
	}
	cs := kinds["Deployment"].Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Readiness.HTTPGet.Path != "/readyz" || cs[0].Liveness.HTTPGet.Path != "/livez" ||
		len(cs[0].Ports) != 1 || cs[0].Ports[0].Name != cs[0].Readiness.HTTPGet.Port {
		t.Fatalf("relay container probes: %+v", cs)
	}
	yml := kinds["ConfigMap"].Data["txbox.yaml"]
	if want := `listen: ":` + strconv.Itoa(cs[0].Ports[0].ContainerPort) + `"`; !strings.Contains(yml, want) {
		t.Errorf("the ConfigMap's health listener is not on the probed port (%s):\n%s", want, yml)
	}
	_, err = config.Load(config.Source{Name: "txbox.yaml", YAML: []byte(yml)})
	if err != nil {
		t.Fatalf("the ConfigMap's txbox.yaml: %v", err)
	}
}
