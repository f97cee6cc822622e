// Command clientgo_informer runs client-go's shared informer on the ConfigMaps of one namespace,
// as every controller does, and prints its store whenever it changes, as one JSON line:
// {"synced": true, "objects": {"name": "resourceVersion", ...}}. Usage: URL NAMESPACE. It runs
// until killed; the test reading it decides when the store has converged.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func main() {
	cfg := &rest.Config{Host: os.Args[1]}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientgo_informer:", err)
		os.Exit(1)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(os.Args[2]))
	informer := factory.Core().V1().ConfigMaps().Informer()
	stop := make(chan struct{})
	factory.Start(stop)
	var last map[string]string
	lastSynced := false
	for {
		synced := informer.HasSynced()
		objects := map[string]string{}
		for _, o := range informer.GetStore().List() {
			cm := o.(*corev1.ConfigMap)
			objects[cm.Name] = cm.ResourceVersion
		}
		if synced != lastSynced || !reflect.DeepEqual(objects, last) {
			b, _ := json.Marshal(map[string]interface{}{"synced": synced, "objects": objects})
			fmt.Println(string(b))
			last, lastSynced = objects, synced
		}
		time.Sleep(100 * time.Millisecond)
	}
}
